package datasource

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// snapshotSource checks a restore's VolumeSnapshot and its content.
func (r *Resolver) snapshotSource(ctx context.Context, claim *v1.PersistentVolumeClaim, name string) (*Source, error) {
	src := &Source{Kind: KindSnapshot, Namespace: claim.Namespace, Name: name}
	snap, err := r.cfg.Snapshots.VolumeSnapshots(claim.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, refused("the %s does not exist", src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", src, err)
	}
	if snap.DeletionTimestamp != nil && !slices.Contains(snap.Finalizers, sourceprotection.FinalizerSnapshotSource) {
		return nil, refused("the %s is being deleted", src)
	}
	if snap.Status == nil || snap.Status.BoundVolumeSnapshotContentName == nil || *snap.Status.BoundVolumeSnapshotContentName == "" {
		return nil, refused("the %s is not bound to a VolumeSnapshotContent yet", src)
	}
	if snap.Status.ReadyToUse == nil || !*snap.Status.ReadyToUse {
		return nil, refused("the %s is not ready to use yet", src)
	}
	contentName := *snap.Status.BoundVolumeSnapshotContentName
	content, err := r.snapshotContent(ctx, contentName)
	if apierrors.IsNotFound(err) {
		return nil, refused("the VolumeSnapshotContent %q of the %s does not exist", contentName, src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading VolumeSnapshotContent %q of %s: %w", contentName, src, err)
	}
	if ref := content.Spec.VolumeSnapshotRef; ref.UID != snap.UID || ref.Name != snap.Name || ref.Namespace != snap.Namespace {
		return nil, refused("the VolumeSnapshotContent %q of the %s is bound to another snapshot", contentName, src)
	}
	if content.Spec.Driver != r.cfg.DriverName {
		return nil, refused("the %s is a snapshot of CSI driver %q; only snapshots of %q can be restored here", src, content.Spec.Driver, r.cfg.DriverName)
	}
	if content.Status == nil || content.Status.SnapshotHandle == nil || *content.Status.SnapshotHandle == "" {
		return nil, refused("the VolumeSnapshotContent %q of the %s has no snapshot handle yet", contentName, src)
	}
	if want, size := claimSize(claim), restoreSize(snap, content); size != nil && want.Cmp(*size) < 0 {
		return nil, refused("the claim requests %s, less than the restore size %s of the %s", want.String(), size.String(), src)
	}
	if err := r.checkModeConversion(claim, content, src); err != nil {
		return nil, err
	}
	src.Content = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: *content.Status.SnapshotHandle}}}
	src.Affinity = r.snapshotAffinity(snap, content)
	return src, nil
}

// snapshotContent reads a VolumeSnapshotContent (see Config.ContentReader).
func (r *Resolver) snapshotContent(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error) {
	if read := r.cfg.ContentReader; read != nil {
		return read(ctx, name)
	}
	return r.cfg.SnapshotContents.Get(name)
}

// checkModeConversion refuses a restore into another volume mode than the
// snapshot's source had, unless the content allows it (upstream's rule).
func (r *Resolver) checkModeConversion(claim *v1.PersistentVolumeClaim, content *snapv1.VolumeSnapshotContent, src *Source) error {
	if !r.cfg.PreventVolumeModeConversion || content.Spec.SourceVolumeMode == nil {
		return nil
	}
	want, had := volumeMode(claim.Spec.VolumeMode), *content.Spec.SourceVolumeMode
	if want == had {
		return nil
	}
	if allowed, err := strconv.ParseBool(content.Annotations[AnnAllowVolumeModeChange]); err == nil && allowed {
		return nil
	}
	return refused("the claim asks for volume mode %s but the %s was taken of a %s volume; set annotation %s=true on its VolumeSnapshotContent %q to allow the conversion",
		want, src, had, AnnAllowVolumeModeChange, content.Name)
}

// snapshotAffinity is the node affinity of the snapshot's source volume,
// when that volume still exists and is the one the snapshot was taken of;
// else nil (unknown: the restore is not narrowed, the driver decides).
// VolumeSnapshotContent has no field for the snapshot's own topology (CSI
// Snapshot.accessible_topology, KEP-5943) in the external-snapshotter
// client modules served up to v8.7.0; see topology.CopyReach.
func (r *Resolver) snapshotAffinity(snap *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) *v1.VolumeNodeAffinity {
	claimName := snap.Spec.Source.PersistentVolumeClaimName
	if claimName == nil || r.cfg.Claims == nil || r.cfg.Volumes == nil {
		return nil
	}
	source, err := r.cfg.Claims.PersistentVolumeClaims(snap.Namespace).Get(*claimName)
	if err != nil || source.Spec.VolumeName == "" {
		return nil
	}
	pv, err := r.cfg.Volumes.Get(source.Spec.VolumeName)
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.cfg.DriverName {
		return nil
	}
	if h := content.Spec.Source.VolumeHandle; h != nil && *h != pv.Spec.CSI.VolumeHandle {
		return nil // the claim now has another volume
	}
	return pv.Spec.NodeAffinity
}

// restoreSize is the size a restore needs: the snapshot's, else its
// content's; nil when neither says.
func restoreSize(snap *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) *resource.Quantity {
	if snap.Status != nil && snap.Status.RestoreSize != nil {
		return snap.Status.RestoreSize
	}
	if content.Status != nil && content.Status.RestoreSize != nil {
		return resource.NewQuantity(*content.Status.RestoreSize, resource.BinarySI)
	}
	return nil
}
