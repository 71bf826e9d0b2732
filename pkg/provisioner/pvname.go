package provisioner

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// The PV of a volume has the volume's name, as upstream external-provisioner
// v6.3.0 names it: <--volume-name-prefix>-<claim UID>, the UID cut to
// --volume-name-uuid-length without its dashes (volumeName). With the
// defaults that is pvc-<claim UID>, the name the provisioning library gives
// in ProvisionOptions.PVName; with other values the two differ, and Provision
// uses its own. csi.storage.k8s.io/pv/name and ${pv.name} in secret
// templates follow.
//
// The library looks for an existing PV of a claim only by its own name
// pvc-<claim UID> before it calls Provision. Provision therefore looks for
// one itself, by the claim's UID in the PV's claimRef (ClaimVolumeIndex),
// whatever the PV's name: one of this name, one an older build named
// pvc-<claim UID>, or one made under another prefix before a restart. A claim
// with such a PV gets no second volume.

// indexVolumesByClaim is the name of the PV informer's index by the UID in
// spec.claimRef.
const indexVolumesByClaim = "claimUID"

// ClaimVolumeIndex answers which PVs refer to a claim (spec.claimRef.uid),
// from a PV informer indexed by that UID: no API call, and the same cost
// with any number of PVs. Safe for concurrent use.
type ClaimVolumeIndex struct {
	indexer cache.Indexer
}

// NewClaimVolumeIndex adds the by-claim index to a PV informer (before it
// starts) and returns the index over it.
func NewClaimVolumeIndex(informer cache.SharedIndexInformer) (*ClaimVolumeIndex, error) {
	if err := informer.AddIndexers(cache.Indexers{indexVolumesByClaim: volumeClaimUID}); err != nil {
		return nil, fmt.Errorf("indexing PVs by claim: %w", err)
	}
	return &ClaimVolumeIndex{indexer: informer.GetIndexer()}, nil
}

// volumeClaimUID is the index function: the UID of the claim a PV refers
// to, none for a PV without one.
func volumeClaimUID(obj any) ([]string, error) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
		return nil, nil
	}
	return []string{string(pv.Spec.ClaimRef.UID)}, nil
}

// Of returns the PVs whose claimRef names the claim of UID uid. A nil
// index holds nothing.
func (x *ClaimVolumeIndex) Of(uid types.UID) []*v1.PersistentVolume {
	if x == nil {
		return nil
	}
	objs, err := x.indexer.ByIndex(indexVolumesByClaim, string(uid))
	if err != nil {
		return nil
	}
	out := make([]*v1.PersistentVolume, 0, len(objs))
	for _, obj := range objs {
		if pv, ok := obj.(*v1.PersistentVolume); ok {
			out = append(out, pv)
		}
	}
	return out
}

// Get returns the PV of a name from the informer.
func (x *ClaimVolumeIndex) Get(name string) (*v1.PersistentVolume, bool) {
	if x == nil {
		return nil, false
	}
	obj, exists, err := x.indexer.GetByKey(name)
	if err != nil || !exists {
		return nil, false
	}
	pv, ok := obj.(*v1.PersistentVolume)
	return pv, ok
}

// pvName is the name of a claim's volume and of its PV.
func (p *Provisioner) pvName(claim *v1.PersistentVolumeClaim) string {
	return volumeName(p.cfg.VolumeNamePrefix, claim.UID, p.cfg.VolumeNameUUIDLength)
}

// livePV reports whether a PV is in use: not being deleted, not released
// by its claim and not failed.
func livePV(pv *v1.PersistentVolume) bool {
	return pv.DeletionTimestamp == nil && pv.Status.Phase != v1.VolumeReleased && pv.Status.Phase != v1.VolumeFailed
}

// errVolumeNameTaken: the PV name of a claim's volume is held by a PV of
// another claim (or of none). With --volume-name-uuid-length the names of
// two claims can be the same.
var errVolumeNameTaken = errors.New("volume name taken")

// checkExistingPV is Provision's look, in the PV informer, for what the
// library's look by pvc-<claim UID> misses. A live PV that refers to the
// claim, whatever its name, ends the provision without a CreateVolume (an
// IgnoredError: the PV controller binds the claim to it). A live PV of the
// volume's name that refers to another claim, or to none, fails it: a
// CreateVolume of that name would return the other claim's volume.
func (p *Provisioner) checkExistingPV(claim *v1.PersistentVolumeClaim, name string) (controller.ProvisioningState, error) {
	for _, pv := range p.deps.ClaimVolumes.Of(claim.UID) {
		if livePV(pv) {
			return controller.ProvisioningFinished, &controller.IgnoredError{
				Reason: fmt.Sprintf("PV %q of the claim already exists; not creating another volume", pv.Name)}
		}
	}
	pv, ok := p.deps.ClaimVolumes.Get(name)
	if !ok || !livePV(pv) || (pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == claim.UID) {
		return controller.ProvisioningFinished, nil
	}
	owner := "no claim"
	if ref := pv.Spec.ClaimRef; ref != nil {
		owner = fmt.Sprintf("claim %s/%s (UID %s)", ref.Namespace, ref.Name, ref.UID)
	}
	hint := ""
	if p.cfg.VolumeNameUUIDLength > 0 {
		hint = fmt.Sprintf("; with --volume-name-uuid-length=%d the names of two claims can be the same: recreate the claim (it gets a new UID), or use a longer length",
			p.cfg.VolumeNameUUIDLength)
	}
	return controller.ProvisioningFinished, fmt.Errorf("%w: PV %q, the name of this claim's volume, exists for %s%s", errVolumeNameTaken, name, owner, hint)
}
