package provisioner

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// deletedMemory is how long the provisioner remembers that it deleted a PV's
// volume. It only has to outlast the watch lag between the library's
// finalizer patch and the informer seeing it (milliseconds); after it, a
// PV still carrying the finalizer is deleted again at the next resync, which
// is how a failed finalizer patch recovers.
const deletedMemory = 2 * time.Minute

var _ controller.DeletionGuard = &Provisioner{}

// deletedVolumes remembers the PVs whose volume this process has deleted
// (DeleteVolume succeeded), by PV UID. Safe for concurrent use.
//
// Why: the library deletes a PV in one pass (DeleteVolume, PV DELETE, then
// removal of its finalizer), but the PV DELETE itself produces an update
// event (deletionTimestamp set, finalizer still present) that queues the PV
// again; if that is processed before the finalizer patch reaches the
// informer, the library's own check says "delete" a second time, which
// costs a second DeleteVolume, a second PV DELETE and a second patch.
type deletedVolumes struct {
	now func() time.Time

	mu   sync.Mutex
	when map[types.UID]time.Time
}

func newDeletedVolumes(now func() time.Time) *deletedVolumes {
	if now == nil {
		now = time.Now
	}
	return &deletedVolumes{now: now, when: map[types.UID]time.Time{}}
}

// record notes that the volume of PV uid is gone, and forgets entries
// older than deletedMemory, so the map stays as small as the deletions of
// the last two minutes.
func (d *deletedVolumes) record(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for k, t := range d.when {
		if now.Sub(t) > deletedMemory {
			delete(d.when, k)
		}
	}
	d.when[uid] = now
}

// recent reports whether the volume of PV uid was deleted within
// deletedMemory.
func (d *deletedVolumes) recent(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.when[uid]
	return ok && d.now().Sub(t) <= deletedMemory
}

// ShouldDelete implements controller.DeletionGuard: a PV that is already
// being deleted and whose volume this process deleted moments ago is not
// deleted again (see deletedVolumes). With node deployment, a PV whose
// volume is on another node is that node's instance's
// (NodeDeployment.ownsVolume). Every other PV is left to the library's own
// checks.
func (p *Provisioner) ShouldDelete(ctx context.Context, pv *v1.PersistentVolume) bool {
	if !p.cfg.Node.ownsVolume(pv) {
		return false
	}
	if pv.DeletionTimestamp != nil && p.deleted.recent(pv.UID) {
		klog.FromContext(ctx).V(4).Info("Volume already deleted, waiting for the PV's finalizer removal to be observed", "pv", klog.KObj(pv))
		return false
	}
	return true
}
