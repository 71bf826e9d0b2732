package datasource

import (
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// cloneSource checks a clone's source claim and its volume.
func (r *Resolver) cloneSource(claim *v1.PersistentVolumeClaim, name string) (*Source, error) {
	src := &Source{Kind: KindClaim, Namespace: claim.Namespace, Name: name}
	if r.cfg.Claims == nil || r.cfg.Volumes == nil {
		return nil, refused("cloning is not wired in this csi-provisioner (no claim and volume listers)")
	}
	source, err := r.cfg.Claims.PersistentVolumeClaims(claim.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, refused("the source claim %s does not exist", src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading source claim %s: %w", src, err)
	}
	if source.DeletionTimestamp != nil && !slices.Contains(source.Finalizers, sourceprotection.FinalizerCloneSource) {
		return nil, refused("the source claim %s is being deleted", src)
	}
	if source.Status.Phase != v1.ClaimBound || source.Spec.VolumeName == "" {
		return nil, refused("the source claim %s is not bound to a volume yet (phase %q)", src, source.Status.Phase)
	}
	want, have := claimSize(claim), claimSize(source)
	if want.Cmp(have) < 0 {
		return nil, refused("the claim requests %s, less than the %s of its source claim %s; a clone must be at least as large as its source",
			want.String(), have.String(), src)
	}
	pv, err := r.cfg.Volumes.Get(source.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil, refused("the volume %q of the source claim %s does not exist", source.Spec.VolumeName, src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading volume %q of source claim %s: %w", source.Spec.VolumeName, src, err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.cfg.DriverName {
		return nil, refused("the source claim %s is a volume of another driver (%s); only volumes of CSI driver %q can be cloned here",
			src, volumeDriver(pv), r.cfg.DriverName)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != source.UID || ref.Name != source.Name || ref.Namespace != source.Namespace {
		return nil, refused("the volume %q of the source claim %s is bound to another claim", pv.Name, src)
	}
	// The source claim is Bound and the PV names it: the binding is
	// settled. The PV's own phase may lag behind in the informer (it was
	// seen at "" for minutes on a loaded machine), so only a PV that has
	// left its claim refuses.
	if pv.Status.Phase == v1.VolumeReleased || pv.Status.Phase == v1.VolumeFailed {
		return nil, refused("the volume %q of the source claim %s is %q, not Bound", pv.Name, src, pv.Status.Phase)
	}
	if got, srcMode := volumeMode(claim.Spec.VolumeMode), volumeMode(pv.Spec.VolumeMode); got != srcMode {
		return nil, refused("the claim asks for volume mode %s but its source claim %s is %s; a clone keeps its source's mode", got, src, srcMode)
	}
	src.Content = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: pv.Spec.CSI.VolumeHandle}}}
	src.Affinity = pv.Spec.NodeAffinity
	return src, nil
}
