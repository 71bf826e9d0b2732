package inflight

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// NameGuard resolves a PV create that returns AlreadyExists, which the
// provisioning library takes for success (upstream external-provisioner
// #1469): a volume whose PV cannot be created under its name must not be
// left without one. The fields are set per create; Decisions may be nil.
type NameGuard struct {
	// PVs reads the PV that holds the name.
	PVs interface {
		Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.PersistentVolume, error)
	}
	// Recorder posts VolumeNameTaken on the claim.
	Recorder record.EventRecorder
	// DeleteVolume deletes the new volume of pv, whose name another
	// volume's PV holds.
	DeleteVolume func(ctx context.Context, pv *v1.PersistentVolume) error
	// Decisions, when set, is told that the claim's new volume got no PV,
	// so that its ProvisioningSucceeded Event is dropped.
	Decisions Decisions
}

// Decisions learns that a claim's new volume got no PV: it was deleted, or
// its name and volume are another claim's PV's.
type Decisions interface {
	RecordVolumeDeleted(uid types.UID)
	RecordNameTaken(uid types.UID)
}

// Resolve decides about a PV create that found pv's name taken
// (AlreadyExists). nil: the existing PV holds this very volume for this
// claim and is not going away, or the name was resolved (the new volume
// deleted, or left to the other claim's PV that holds it, each told by a
// VolumeNameTaken Event); the library may take the PV as saved. An error:
// the create is to be retried (the PV went meanwhile, or deleting the new
// volume failed).
func (g NameGuard) Resolve(ctx context.Context, pv *v1.PersistentVolume) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pv", pv.Name, "volumeHandle", pv.Spec.CSI.VolumeHandle)
	existing, err := g.PVs.Get(ctx, pv.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Gone meanwhile: the library's retry of the create will succeed.
		return fmt.Errorf("PV %q existed and is gone, creating it again", pv.Name)
	}
	if err != nil {
		return fmt.Errorf("reading PV %q that already exists: %w", pv.Name, err)
	}
	if holdsSameVolume(existing, pv) {
		logger.V(2).Info("PV already exists for this volume and claim")
		return nil
	}
	if heldByOtherClaim(existing, pv) {
		return g.nameCollision(ctx, pv, existing)
	}
	logger.Info("PV name held by another volume, deleting the new volume", "existingVolumeHandle", handleOf(existing),
		"existingDeleting", existing.DeletionTimestamp != nil, "existingPhase", existing.Status.Phase)
	if err := g.DeleteVolume(ctx, pv); err != nil {
		return fmt.Errorf("PV %q is held by another volume; deleting new volume %q: %w", pv.Name, pv.Spec.CSI.VolumeHandle, err)
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		if g.Decisions != nil {
			g.Decisions.RecordVolumeDeleted(ref.UID)
		}
		claim := &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
		g.Recorder.Eventf(claim, v1.EventTypeWarning, ReasonVolumeNameTaken,
			"PV %q already exists for volume %q (being deleted: %t), not for the new volume %q, which was deleted; the claim is provisioned again once that PV is gone",
			pv.Name, handleOf(existing), existing.DeletionTimestamp != nil, pv.Spec.CSI.VolumeHandle)
	}
	return nil
}

// holdsSameVolume: existing is the PV we meant to create, alive: same
// driver and volume handle, same claim, not being deleted or released.
func holdsSameVolume(existing, want *v1.PersistentVolume) bool {
	if existing.Spec.CSI == nil || existing.Spec.CSI.Driver != want.Spec.CSI.Driver ||
		existing.Spec.CSI.VolumeHandle != want.Spec.CSI.VolumeHandle {
		return false
	}
	if existing.DeletionTimestamp != nil || existing.Status.Phase == v1.VolumeReleased || existing.Status.Phase == v1.VolumeFailed {
		return false
	}
	if want.Spec.ClaimRef == nil {
		return true
	}
	return existing.Spec.ClaimRef != nil && existing.Spec.ClaimRef.UID == want.Spec.ClaimRef.UID
}

// heldByOtherClaim: existing holds the very volume we meant to give a PV,
// for another claim (or none). With --volume-name-uuid-length two claims
// can have the same volume name, and the driver then returns the first
// claim's volume to the second's CreateVolume: that volume is not ours to
// delete, whatever the state of its PV.
func heldByOtherClaim(existing, want *v1.PersistentVolume) bool {
	if existing.Spec.CSI == nil || existing.Spec.CSI.Driver != want.Spec.CSI.Driver ||
		existing.Spec.CSI.VolumeHandle != want.Spec.CSI.VolumeHandle || want.Spec.ClaimRef == nil {
		return false
	}
	return existing.Spec.ClaimRef == nil || existing.Spec.ClaimRef.UID != want.Spec.ClaimRef.UID
}

// nameCollision leaves the volume of another claim's PV alone: the PV is
// not created, nothing is deleted, and a VolumeNameTaken Event tells the
// claim (Provision refuses the claim from then on: checkExistingPV).
func (g NameGuard) nameCollision(ctx context.Context, pv, existing *v1.PersistentVolume) error {
	owner := "no claim"
	if ref := existing.Spec.ClaimRef; ref != nil {
		owner = fmt.Sprintf("claim %s/%s (UID %s)", ref.Namespace, ref.Name, ref.UID)
	}
	klog.FromContext(ctx).Error(nil, "The volume's name is that of another claim's volume; leaving that volume alone", "pv", pv.Name,
		"volumeHandle", pv.Spec.CSI.VolumeHandle, "owner", owner)
	ref := pv.Spec.ClaimRef
	if g.Decisions != nil {
		g.Decisions.RecordNameTaken(ref.UID)
	}
	claim := &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	g.Recorder.Eventf(claim, v1.EventTypeWarning, ReasonVolumeNameTaken,
		"PV %q already exists for volume %q of %s: the name of this claim's volume is the same, and the driver returned that volume; it was left alone. Recreate the claim (it gets a new UID), or use a longer --volume-name-uuid-length",
		pv.Name, handleOf(existing), owner)
	return nil
}

func handleOf(pv *v1.PersistentVolume) string {
	if pv.Spec.CSI == nil {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
}
