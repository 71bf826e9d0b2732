package driver

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// recordOf waits until the driver has recorded a CreateVolume of name and
// returns the record.
func recordOf(ctx context.Context, t *testing.T, d *Driver, name string) CreateRecord {
	t.Helper()
	var rec CreateRecord
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, r := range d.Requests() {
			if r.Name == name {
				rec = r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no CreateVolume of %s recorded: %v", name, err)
	}
	return rec
}

// A late success outlives its caller: the caller's deadline passes, the
// driver still creates the volume afterwards, and the caller's retry finds
// it.
func TestLateSuccess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(3 * time.Second), LateSuccess: true, Count: 1}}
	})
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.CreateVolume(callCtx, makeCreate("late", gi).requisite("z2").CreateVolumeRequest); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("code %v (%v), want DeadlineExceeded: the caller gives up first", status.Code(err), err)
	}
	rec := recordOf(ctx, t, d, "late")
	if rec.Code != "OK" || !rec.CallerGone || !cmp.Equal(rec.Segment, zone("z2")) {
		t.Errorf("record %+v, want OK in z2 with the caller gone", rec)
	}
	vols := d.Volumes()
	if len(vols) != 1 || vols[0].ID != rec.Result {
		t.Fatalf("volumes %+v, want the late one, %s", vols, rec.Result)
	}
	// The rule retired: the retry answers with the same volume. The record
	// is written just before the late call lets go of the name, so a retry
	// in between is told ABORTED (the name is in progress), which a CO
	// retries.
	var again *csi.CreateVolumeResponse
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		again, err = c.CreateVolume(ctx, makeCreate("late", gi).requisite("z2").CreateVolumeRequest)
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || again.GetVolume().GetVolumeId() != rec.Result {
		t.Errorf("retry = %v, %v; want volume %s", again, err, rec.Result)
	}
}

// A slow call without late success is given up with its caller: the
// driver does not carry it out.
func TestSlowCallGivenUp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(time.Hour)}}
	})
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.CreateVolume(callCtx, makeCreate("slow", gi).CreateVolumeRequest); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("code %v (%v), want DeadlineExceeded", status.Code(err), err)
	}
	rec := recordOf(ctx, t, d, "slow")
	// The server sees the deadline pass, or the client cancel the call
	// when it sees it pass first.
	if (rec.Code != codes.DeadlineExceeded.String() && rec.Code != codes.Canceled.String()) || !rec.CallerGone {
		t.Errorf("record %+v, want DeadlineExceeded or Canceled with the caller gone", rec)
	}
	if vols := d.Volumes(); len(vols) != 0 {
		t.Errorf("volumes %+v after the caller gave up, want none", vols)
	}
}

// While a CreateVolume of a name still runs (here held by a late-success
// rule after its caller gave up), another CreateVolume of the same name,
// even without topology, gets ABORTED instead of a second volume; once the
// first is done, the retry finds its volume. This is what lets a caller
// that clears a volume it never heard back about (csi-provisioner's
// in-flight record) find the late one instead of leaking it.
func TestCreateOfNameInProgressAborted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(3 * time.Second), LateSuccess: true, Count: 1}}
	})
	callCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := c.CreateVolume(callCtx, makeCreate("held", gi).requisite("z2").CreateVolumeRequest); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("code %v (%v), want DeadlineExceeded: the caller gives up first", status.Code(err), err)
	}
	_, err := c.CreateVolume(ctx, makeCreate("held", gi).CreateVolumeRequest)
	if status.Code(err) != codes.Aborted {
		t.Fatalf("second CreateVolume while the first runs: code %v (%v), want Aborted", status.Code(err), err)
	}
	var vol *csi.Volume
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := c.CreateVolume(ctx, makeCreate("held", gi).CreateVolumeRequest)
		if status.Code(err) == codes.Aborted {
			return false, nil
		}
		vol = resp.GetVolume()
		return true, err
	}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	vols := d.Volumes()
	if len(vols) != 1 || vols[0].ID != vol.GetVolumeId() || !cmp.Equal(vols[0].Segment, zone("z2")) {
		t.Errorf("volumes %+v, retry answered %s; want exactly the held one, in z2", vols, vol.GetVolumeId())
	}
}
