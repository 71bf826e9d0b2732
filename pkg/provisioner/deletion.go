package provisioner

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/util"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
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

// deletionSecrets returns the secrets DeleteVolume gets for pv
// (deletionSecretRef says which). A secret that no longer exists gives no
// secrets, as upstream: DeleteVolume is called without them (a namespace
// deleted with its claims takes their secrets along). Any other failure to
// read it is returned, and the delete retried, where upstream would call
// DeleteVolume without the credentials the class asked for.
func (p *Provisioner) deletionSecrets(ctx context.Context, pv *v1.PersistentVolume, migrated bool) (map[string]string, error) {
	ref, err := p.deletionSecretRef(ctx, pv, migrated)
	if err != nil || ref == nil {
		return nil, err
	}
	secrets, err := p.readSecret(ctx, ref)
	if apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Info("Deletion secret not found, deleting the volume without secrets",
			"pv", klog.KObj(pv), "secret", klog.KRef(ref.Namespace, ref.Name))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading deletion secret of PV %q: %w", pv.Name, err)
	}
	return secrets, nil
}

// deletionSecretRef returns the secret DeleteVolume needs for pv, as
// upstream chooses it:
//   - the PV's deletion-secret annotations when it has both; empty ones
//     (a class without a provisioner secret) mean none;
//   - without them, the provisioner secret of the PV's StorageClass (its
//     own keys, deprecated ones or the default secret), resolved for the
//     PV's name and its claimRef's name and namespace; none when the class
//     no longer exists or the PV has no claimRef. A class of another
//     provisioner is not used (its secrets are not meant for this driver),
//     except, for a migrated PV of the in-tree plugin the driver replaces,
//     a class of that plugin, translated to CSI as for provisioning.
func (p *Provisioner) deletionSecretRef(ctx context.Context, pv *v1.PersistentVolume, migrated bool) (*v1.SecretReference, error) {
	logger := klog.FromContext(ctx)
	name, hasName := pv.Annotations[annDeletionSecretName]
	ns, hasNamespace := pv.Annotations[annDeletionSecretNamespace]
	if hasName && hasNamespace {
		if name == "" || ns == "" {
			return nil, nil
		}
		return &v1.SecretReference{Name: name, Namespace: ns}, nil
	}
	className := util.GetPersistentVolumeClass(pv)
	if className == "" || p.deps.Classes == nil {
		return nil, nil
	}
	class, err := p.deps.Classes.Get(className)
	if err != nil {
		logger.Info("StorageClass of a PV without deletion-secret annotations not found, deleting the volume without secrets",
			"pv", klog.KObj(pv), "storageClass", className, "err", err)
		return nil, nil
	}
	if migrated && p.migration.servesClass(class) {
		if class, err = p.migration.translateClass(logger, class); err != nil {
			return nil, fmt.Errorf("deletion secret of PV %q: %w", pv.Name, err)
		}
	} else if class.Provisioner != p.cfg.DriverName {
		logger.Info("StorageClass of a PV without deletion-secret annotations belongs to another provisioner, deleting the volume without secrets",
			"pv", klog.KObj(pv), "storageClass", className, "provisioner", class.Provisioner)
		return nil, nil
	}
	secret, ok, err := classparams.ProvisionerSecret(class.Parameters)
	if pv.Spec.ClaimRef == nil {
		if ok || err != nil {
			logger.Info("PV without deletion-secret annotations has no claimRef to resolve its class's provisioner secret, deleting the volume without secrets",
				"pv", klog.KObj(pv), "storageClass", className)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deletion secret of PV %q from StorageClass %q: %w", pv.Name, className, err)
	}
	if !ok {
		return nil, nil
	}
	ref, err := secret.Resolve(classparams.TemplateVars{
		PVName:       pv.Name,
		PVCName:      pv.Spec.ClaimRef.Name,
		PVCNamespace: pv.Spec.ClaimRef.Namespace,
	})
	if err != nil {
		return nil, fmt.Errorf("deletion secret of PV %q from StorageClass %q: %w", pv.Name, className, err)
	}
	return ref, nil
}
