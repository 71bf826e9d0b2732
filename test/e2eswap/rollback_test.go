package e2eswap

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// slowCreate keeps CreateVolume in flight across the stop of ours, within
// the 10 s --timeout of one call: each call ends during the drain of a
// stopping csi-provisioner (up to 20 s; the lab waits 15 s for the process
// before SIGKILL, a Deployment 30 s).
const slowCreate = 8 * time.Second

// rollbackClaims is how many claims have a CreateVolume in flight when ours
// stops, and rollbackDeleted how many of them are deleted before upstream
// starts.
const (
	rollbackClaims  = 6
	rollbackDeleted = 2
)

// TestRollbackImageOnly rolls back to upstream by swapping the image and
// nothing else: ours is stopped (SIGTERM) while claims have a CreateVolume
// in flight, some of those claims are deleted while no provisioner runs,
// upstream starts without csi-provisioner --remove-in-flight-records, and
// everything is deleted. No claim may stay Terminating on the in-flight
// record, which upstream never removes, and no volume or PV may be left.
func TestRollbackImageOnly(t *testing.T) {
	start := time.Now()
	w := newWorld(t, "rollback")
	swapTo(t, "")
	if err := env.SetFaults(w.ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(slowCreate)}}); err != nil {
		t.Fatal(err)
	}
	names := w.create("r", rollbackClaims, true)
	w.waitSeenWithRecord(names)
	inFlight := w.countInFlight()
	stopping := time.Now()
	env.StopProvisioner()
	took := time.Since(stopping)
	if err := env.SetFaults(w.ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped csi-provisioner with %d of %d claims in flight (CreateVolume takes %s); it exited after %s",
		inFlight, rollbackClaims, slowCreate, took.Round(time.Millisecond))
	w.remove(names[:rollbackDeleted])

	swapTo(t, upstream)
	w.waitBound(w.live)
	w.remove(slices.Clone(w.live))
	w.waitGone()
	w.waitNoPVs()
	w.checkDriver()
	t.Logf("image-only rollback: %d claims deleted, none stuck, no PV left (%s)", len(w.deleted), time.Since(start).Round(time.Second))
}

// waitNoPVs waits until no PV refers to a claim of the namespace: the
// volumes of the deleted claims are deleted too.
func (w *world) waitNoPVs() {
	w.t.Helper()
	w.waitFor("PVs of deleted claims left", func(ctx context.Context) (bool, string, error) {
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var left []string
		for _, pv := range pvs.Items {
			if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == w.ns {
				left = append(left, pv.Name+" ("+ref.Name+")")
			}
		}
		return len(left) == 0, fmt.Sprintf("%d left: %v", len(left), left), nil
	})
}

// countInFlight counts the namespace's claims that carry the in-flight
// record and are not Bound.
func (w *world) countInFlight() int {
	w.t.Helper()
	claims, err := w.claims(context.WithoutCancel(w.ctx))
	if err != nil {
		w.t.Fatal(err)
	}
	n := 0
	for _, c := range claims {
		if inflight.HasFinalizer(&c) && c.Status.Phase != v1.ClaimBound {
			n++
		}
	}
	return n
}

// waitSeenWithRecord waits until every claim of names has been seen with
// the in-flight record (its CreateVolume started), or Bound.
func (w *world) waitSeenWithRecord(names []string) {
	w.t.Helper()
	seen := map[string]bool{}
	w.waitFor("claims never seen with the in-flight record", func(ctx context.Context) (bool, string, error) {
		claims, err := w.claims(ctx)
		if err != nil {
			return false, "", err
		}
		var missing []string
		for _, name := range names {
			c := claims[name]
			if inflight.HasFinalizer(&c) || c.Status.Phase == v1.ClaimBound {
				seen[name] = true
			}
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d never seen: %v", len(missing), missing), nil
	})
}
