package provisioner

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestShouldDeleteAfterDelete: once Delete has removed a PV's volume, the
// update event of the PV's own deletion (deletionTimestamp set, finalizer
// not yet seen removed) does not delete it again; other PVs, and the same PV
// after deletedMemory (a finalizer patch that failed, retried at resync),
// are deleted as the library decides.
func TestShouldDeleteAfterDelete(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	e.p.deleted = newDeletedVolumes(func() time.Time { return now })
	pv, _, err := e.provision(t, makePVC("data", "fast").withSelectedNode("n1").PersistentVolumeClaim, makeClass("fast").StorageClass, makeNode("n1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	other := pv.DeepCopy()
	other.UID = "other-pv"
	deleting := func(pv *v1.PersistentVolume) *v1.PersistentVolume {
		pv = pv.DeepCopy()
		pv.DeletionTimestamp = &metav1.Time{Time: now}
		return pv
	}

	if !e.p.ShouldDelete(e.ctx, pv) || !e.p.ShouldDelete(e.ctx, deleting(pv)) {
		t.Fatal("ShouldDelete = false before any delete")
	}
	if err := e.p.Delete(e.ctx, pv); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pv   *v1.PersistentVolume
		want bool
	}{
		{name: "same PV being deleted", pv: deleting(pv), want: false},
		{name: "same PV not being deleted", pv: pv, want: true},
		{name: "another PV being deleted", pv: deleting(other), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.p.ShouldDelete(e.ctx, tc.pv); got != tc.want {
				t.Errorf("ShouldDelete = %v, want %v", got, tc.want)
			}
		})
	}
	now = now.Add(deletedMemory + time.Second)
	if !e.p.ShouldDelete(e.ctx, deleting(pv)) {
		t.Error("ShouldDelete = false after deletedMemory: a PV whose finalizer patch failed would never be retried")
	}
	if len(e.csi.deletes) != 1 {
		t.Errorf("DeleteVolume calls = %d, want 1", len(e.csi.deletes))
	}
}
