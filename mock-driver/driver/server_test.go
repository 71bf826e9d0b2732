package driver

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// A fault rule scoped to a segment applies to a CreateVolume whose first
// preferred segment, or without preferred topologies the segment the driver
// would choose, matches: "z2 is full, ask elsewhere".
func TestCreateVolumeFaultScope(t *testing.T) {
	z2Full := []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"zone": "z2"}}}
	tests := []struct {
		name     string
		existing []createReq
		req      createReq
		wantCode codes.Code
	}{
		{name: "first preferred in the segment", req: makeCreate("v", gi).requisite("z1", "z2").preferred("z2", "z1"), wantCode: codes.ResourceExhausted},
		{name: "first preferred elsewhere", req: makeCreate("v", gi).requisite("z1", "z2").preferred("z1", "z2")},
		{name: "no preferred, the driver would choose the segment", req: makeCreate("v", gi).requisite("z2", "z1"), wantCode: codes.ResourceExhausted},
		{name: "no preferred, the driver would choose elsewhere", req: makeCreate("v", gi).requisite("z1", "z2")},
		{
			name:     "no requirements, z2 has most room",
			existing: []createReq{makeCreate("a", gi).requisite("z1")},
			req:      makeCreate("v", gi),
			wantCode: codes.ResourceExhausted,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d, c := serve(t, nil)
			for _, r := range tc.existing {
				if _, err := c.CreateVolume(ctx, r.CreateVolumeRequest); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.SetFaults(z2Full); err != nil {
				t.Fatal(err)
			}
			_, err := c.CreateVolume(ctx, tc.req.CreateVolumeRequest)
			if status.Code(err) != tc.wantCode {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
		})
	}
}

// Every method gets its faults from the gRPC server.
func TestFaultsOnEveryMethod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) { c.Mode = ModeBoth; c.NodeID = "n1"; c.NodeTopology = map[string]string{"zone": "z1"} })
	vol, err := c.CreateVolume(ctx, makeCreate("v", gi).requisite("z2").CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	calls := map[string]func() error{
		"Probe": func() error { _, err := c.Probe(ctx, &csi.ProbeRequest{}); return err },
		"GetPluginInfo": func() error {
			_, err := c.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
			return err
		},
		"DeleteVolume": func() error { _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); return err },
		"ControllerPublishVolume": func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap()})
			return err
		},
		"GetCapacity": func() error {
			_, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: zone("z2")}})
			return err
		},
		"NodeGetInfo": func() error { _, err := c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); return err },
	}
	tests := []struct {
		name   string
		rule   faults.Rule
		method string
		want   codes.Code
	}{
		{name: "identity", rule: faults.Rule{Method: "Probe", Code: "FailedPrecondition"}, method: "Probe", want: codes.FailedPrecondition},
		{name: "wildcard", rule: faults.Rule{Method: "*", Code: "Unavailable"}, method: "GetPluginInfo", want: codes.Unavailable},
		{name: "volume's segment", rule: faults.Rule{Method: "ControllerPublishVolume", Code: "Internal", Segment: map[string]string{"zone": "z2"}}, method: "ControllerPublishVolume", want: codes.Internal},
		{name: "not the volume's segment", rule: faults.Rule{Method: "DeleteVolume", Code: "Internal", Segment: map[string]string{"zone": "z1"}}, method: "DeleteVolume", want: codes.OK},
		{name: "requested capacity topology", rule: faults.Rule{Method: "GetCapacity", Code: "Unavailable", Segment: map[string]string{"zone": "z2"}}, method: "GetCapacity", want: codes.Unavailable},
		{name: "node's segment", rule: faults.Rule{Method: "NodeGetInfo", Code: "Unavailable", Segment: map[string]string{"zone": "z1"}}, method: "NodeGetInfo", want: codes.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := d.SetFaults([]faults.Rule{tc.rule}); err != nil {
				t.Fatal(err)
			}
			if got := status.Code(calls[tc.method]()); got != tc.want {
				t.Errorf("%s: code %v, want %v", tc.method, got, tc.want)
			}
		})
	}
}

// The gRPC server records CreateVolume requests, also those a fault
// answered, with the keys of their secrets but never the values.
func TestCreateRecords(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, c := serve(t, func(c *Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"zone": "z2"}, Count: 1}}
	})
	req := makeCreate("v", gi).requisite("z1", "z2").preferred("z2", "z1").params(map[string]string{"type": "fast"})
	req.Secrets = map[string]string{"password": "hunter2"}
	for range 2 {
		_, _ = c.CreateVolume(ctx, req.CreateVolumeRequest)
	}
	want := []CreateRecord{
		{Seq: 1, Name: "v", Requisite: []map[string]string{zone("z1"), zone("z2")}, Preferred: []map[string]string{zone("z2"), zone("z1")},
			Parameters: map[string]string{"type": "fast"}, Code: "ResourceExhausted", SecretKeys: []string{"password"}},
		{Seq: 2, Name: "v", Requisite: []map[string]string{zone("z1"), zone("z2")}, Preferred: []map[string]string{zone("z2"), zone("z1")},
			Parameters: map[string]string{"type": "fast"}, Code: "OK", Result: "vol-000001", Segment: zone("z2"), SecretKeys: []string{"password"}}, // the rule retired
	}
	if diff := cmp.Diff(want, d.Requests(), cmpopts.IgnoreFields(CreateRecord{}, "Time", "Method", "Request"),
		cmpopts.IgnoreFields(CreateRecord{}, "Result"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if data, _ := json.Marshal(d.Requests()); strings.Contains(string(data), "hunter2") {
		t.Errorf("records hold a secret value: %s", data)
	}
	if got := d.Requests()[1].Result; got != "vol-000001" {
		t.Errorf("result of the second request %q, want the volume ID", got)
	}
}

// A restarted driver knows its volumes: re-creating one answers the same
// volume, its bytes still count, IDs are not reused.
func TestRestartKeepsVolumes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	withState := func(c *Config) { c.StateFile = stateFile }
	runOnce := func(fn func(c clients)) {
		ctx, cancel := context.WithCancel(ctx)
		d := newTestDriver(t, withState)
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		<-d.Ready()
		_, c := dial(t, d)
		fn(c)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var first *csi.Volume
	runOnce(func(c clients) {
		resp, err := c.CreateVolume(ctx, makeCreate("keep", 2*gi).requisite("z1").CreateVolumeRequest)
		if err != nil {
			t.Fatal(err)
		}
		first = resp.GetVolume()
		if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: first.GetVolumeId(), NodeId: "n1", VolumeCapability: mountCap()}); err != nil {
			t.Fatal(err)
		}
	})
	runOnce(func(c clients) {
		again, err := c.CreateVolume(ctx, makeCreate("keep", 2*gi).requisite("z1").CreateVolumeRequest)
		if err != nil || again.GetVolume().GetVolumeId() != first.GetVolumeId() {
			t.Errorf("re-create after restart = %v, %v; want volume %s", again, err, first.GetVolumeId())
		}
		if _, err := c.CreateVolume(ctx, makeCreate("more", gi).requisite("z1").CreateVolumeRequest); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("z1 after restart: code %v, want ResourceExhausted (the kept volume fills it)", status.Code(err))
		}
		list, err := c.ListVolumes(ctx, &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(list.GetEntries()); n != 1 || list.GetEntries()[0].GetStatus().GetPublishedNodeIds()[0] != "n1" {
			t.Errorf("listed after restart: %v", list.GetEntries())
		}
		other, err := c.CreateVolume(ctx, makeCreate("other", gi).CreateVolumeRequest)
		if err != nil || other.GetVolume().GetVolumeId() == first.GetVolumeId() {
			t.Errorf("new volume after restart = %v, %v", other, err)
		}
	})
}

func TestRunTwice(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, _ := serve(t, nil)
	if err := d.Run(ctx); err == nil {
		t.Error("a second Run succeeded")
	}
}
