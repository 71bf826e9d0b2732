package bindthrough

import (
	"fmt"
	"reflect"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// annPreResizeCapacity is the PV controller's annotation of a PV whose
// file system awaits a resize (k8s.io/kubernetes/pkg/volume/util); such a
// PV is left to the PV controller.
const annPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"

// claimNotFound is skipReason's reason for a PV whose claim the informer
// does not hold: the only one a later event of the claim may lift.
const claimNotFound = "claim not found"

// skipReason says why a PV and its claim are left to the PV controller; ""
// when Binder binds them.
func skipReason(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim, driver string) string {
	switch {
	case !provisionedBy(pv, driver):
		return "PV of another provisioner"
	case pv.DeletionTimestamp != nil:
		return "PV being deleted"
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "":
		return "PV without a claim UID"
	case pv.Status.Phase == v1.VolumeReleased || pv.Status.Phase == v1.VolumeFailed:
		return "PV " + string(pv.Status.Phase)
	case metav1.HasAnnotation(pv.ObjectMeta, annPreResizeCapacity):
		return "PV awaits a resize"
	case claim == nil:
		return claimNotFound
	case claim.UID != pv.Spec.ClaimRef.UID:
		return "claim of another UID"
	case claim.DeletionTimestamp != nil:
		return "claim being deleted"
	case claim.Spec.VolumeName != "" && claim.Spec.VolumeName != pv.Name:
		return "claim bound to another PV"
	case storagehelpers.GetPersistentVolumeClaimClass(claim) != storagehelpers.GetPersistentVolumeClass(pv):
		return "storage class mismatch"
	case storagehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec):
		return "volume mode mismatch"
	}
	return ""
}

// provisionedBy reports whether driver made pv: its provisioned-by
// annotation names driver, or names an in-tree plugin migrated to driver.
func provisionedBy(pv *v1.PersistentVolume, driver string) bool {
	by := pv.Annotations[storagehelpers.AnnDynamicallyProvisioned]
	return by != "" && (by == driver || pv.Annotations[storagehelpers.AnnMigratedTo] == driver)
}

// done reports whether nothing is left to write for the pair.
func done(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) bool {
	return pv.Status.Phase == v1.VolumeBound && claim.Spec.VolumeName == pv.Name &&
		metav1.HasAnnotation(claim.ObjectMeta, storagehelpers.AnnBindCompleted) && claim.Status.Phase == v1.ClaimBound
}

// volumeStatusBound is pv with phase Bound and an empty message, as the PV
// controller's updateVolumePhase writes it; false when pv is Bound already.
func volumeStatusBound(pv *v1.PersistentVolume) (*v1.PersistentVolume, bool) {
	if pv.Status.Phase == v1.VolumeBound {
		return pv, false
	}
	out := pv.DeepCopy()
	out.Status.Phase = v1.VolumeBound
	out.Status.Message = ""
	return out, true
}

// claimBound is claim bound to pv, as the PV controller's
// bindClaimToVolume writes it; false when nothing changes. A write that
// binds also removes the finalizers of drop (Config.DropFinalizers); they
// alone are no reason to write.
func claimBound(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, drop []string) (*v1.PersistentVolumeClaim, bool) {
	out := claim.DeepCopy()
	dirty := false
	if claim.Spec.VolumeName != pv.Name {
		out.Spec.VolumeName = pv.Name
		if !metav1.HasAnnotation(out.ObjectMeta, storagehelpers.AnnBoundByController) {
			metav1.SetMetaDataAnnotation(&out.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
		}
		dirty = true
	}
	if !metav1.HasAnnotation(out.ObjectMeta, storagehelpers.AnnBindCompleted) {
		metav1.SetMetaDataAnnotation(&out.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
		dirty = true
	}
	if !dirty {
		return claim, false
	}
	if len(drop) > 0 {
		out.Finalizers = slices.DeleteFunc(out.Finalizers, func(f string) bool { return slices.Contains(drop, f) })
	}
	return out, true
}

// claimStatusBound is claim's status Bound to pv, as the PV controller's
// updateClaimStatus writes it (with the VolumeAttributesClass feature, GA
// and locked on since Kubernetes 1.36); false when nothing changes.
func claimStatusBound(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*v1.PersistentVolumeClaim, bool, error) {
	out := claim.DeepCopy()
	dirty := false
	becoming := claim.Status.Phase != v1.ClaimBound
	if becoming {
		out.Status.Phase = v1.ClaimBound
		dirty = true
	}
	if !reflect.DeepEqual(claim.Status.AccessModes, pv.Spec.AccessModes) {
		out.Status.AccessModes = pv.Spec.AccessModes
		dirty = true
	}
	if becoming {
		pvCap, ok := pv.Spec.Capacity[v1.ResourceStorage]
		if !ok {
			return nil, false, fmt.Errorf("PersistentVolume %q has no storage capacity", pv.Name)
		}
		if claimCap, ok := claim.Status.Capacity[v1.ResourceStorage]; !ok || pvCap.Cmp(claimCap) != 0 {
			out.Status.Capacity = pv.Spec.Capacity
			dirty = true
		}
		if claim.Status.Phase == v1.ClaimPending &&
			!reflect.DeepEqual(claim.Status.CurrentVolumeAttributesClassName, pv.Spec.VolumeAttributesClassName) {
			out.Status.CurrentVolumeAttributesClassName = pv.Spec.VolumeAttributesClassName
			dirty = true
		}
	}
	if !dirty {
		return claim, false, nil
	}
	return out, true, nil
}
