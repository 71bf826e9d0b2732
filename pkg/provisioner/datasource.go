package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// annAllowVolumeModeChange on a VolumeSnapshotContent allows a restore into
// another volume mode despite Config.PreventVolumeModeConversion. The name
// is upstream external-provisioner v6.3.0's, so that a fleet that mixes
// both agrees on it. (The finalizers protecting data sources are package
// sourceprotection's.)
const annAllowVolumeModeChange = "snapshot.storage.kubernetes.io/allow-volume-mode-change"

// The data source kinds the provisioner serves itself.
const (
	kindClaim    = "PersistentVolumeClaim"
	kindSnapshot = "VolumeSnapshot"
	// snapshotGroup is the API group of VolumeSnapshot.
	snapshotGroup = snapv1.GroupName
)

// reasonPopulator is the Event reason (upstream's) for a claim left to an
// external volume populator.
const reasonPopulator = "Provisioning"

// ErrSourceRefused marks a claim whose data source cannot be used (yet):
// missing, not bound or not ready, another driver, too large, another
// volume mode. The message says which, in an operator's words.
var ErrSourceRefused = errors.New("data source refused")

// dataSource is a claim's data source as the provisioner resolved it.
type dataSource struct {
	// kind is kindClaim or kindSnapshot.
	kind            string
	namespace, name string
	// content goes into CreateVolume.
	content *csi.VolumeContentSource
	// reach is where the copy may be made (topology.CopyReach), and
	// basis why; affinity is the source volume's node affinity (nil when
	// unknown).
	reach    topology.Reach
	basis    topology.CopyBasis
	affinity *v1.VolumeNodeAffinity
}

// String names the source, e.g. `PersistentVolumeClaim "apps/db"`.
func (s *dataSource) String() string {
	return fmt.Sprintf("%s %q", s.kind, s.namespace+"/"+s.name)
}

// key identifies the source for the protection controller.
func (s *dataSource) key() sourceprotection.Key {
	return sourceprotection.Key{Kind: s.kind, Namespace: s.namespace, Name: s.name}
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSourceRefused, fmt.Sprintf(format, args...))
}

// snapshotAPIWait bounds how long a restore waits for the VolumeSnapshot
// API to be probed and its informers synced, when the API was missing.
const snapshotAPIWait = 5 * time.Second

// resolveSource checks a claim's data source and returns what CreateVolume
// and the topology requirements need of it; nil without a data source. A
// populator's kind returns a *controller.IgnoredError after a Normal Event:
// the populator makes the volume. Refusals wrap ErrSourceRefused (or
// ErrInvalidClaim for what the claim itself gets wrong). Where the copy may
// be made follows the rule of topology.CopyReach, with the class's
// topology.AnnCopyPlacement.
func (p *Provisioner) resolveSource(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (*dataSource, error) {
	src, err := p.resolveSourceObject(ctx, claim)
	if src == nil || err != nil {
		return src, err
	}
	placement, err := topology.ClassCopyPlacement(class)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSourceRefused, err)
	}
	src.reach, src.basis = topology.CopyReach(topology.Copy{Restore: src.kind == kindSnapshot, Affinity: src.affinity, Placement: placement},
		topology.CSINodeKeys(p.csiNode, p.cfg.DriverName))
	return src, nil
}

// csiNode reads a CSINode from the informer, nil when it has none.
func (p *Provisioner) csiNode(name string) *storagev1.CSINode {
	n, err := p.deps.CSINodes.Get(name)
	if err != nil {
		return nil
	}
	return n
}

// resolveSourceObject checks the claim's data source object (see
// resolveSource) and reads its source volume's affinity.
func (p *Provisioner) resolveSourceObject(ctx context.Context, claim *v1.PersistentVolumeClaim) (*dataSource, error) {
	ref := sourceprotection.ClaimRef(claim)
	switch {
	case ref == nil:
		return nil, nil
	case ref.Namespace != "":
		return nil, fmt.Errorf("%w: a data source in another namespace (dataSourceRef %s %q in namespace %q) is not supported by this csi-provisioner (upstream's alpha CrossNamespaceVolumeDataSource)",
			ErrInvalidClaim, ref.Kind, ref.Name, ref.Namespace)
	case ref.Name == "":
		return nil, fmt.Errorf("%w: the data source %s has no name", ErrInvalidClaim, ref.Kind)
	case ref.Group == "" && ref.Kind == kindClaim:
		if !p.cfg.SupportsClone {
			return nil, refused("CSI driver %q cannot clone volumes (it lacks the CLONE_VOLUME controller capability)", p.cfg.DriverName)
		}
		return p.cloneSource(claim, ref.Name)
	case ref.Group == snapshotGroup && ref.Kind == kindSnapshot:
		if !p.cfg.SupportsSnapshot {
			return nil, refused("CSI driver %q cannot restore snapshots (it lacks the CREATE_DELETE_SNAPSHOT controller capability)", p.cfg.DriverName)
		}
		if p.deps.Sources.Snapshots == nil {
			return nil, refused("snapshot restores are not wired in this csi-provisioner (no VolumeSnapshot client)")
		}
		if api := p.deps.Sources.SnapshotAPI; api != nil && !api.WaitReady(ctx, snapshotAPIWait) {
			return nil, refused("the VolumeSnapshot API (%s/v1) is not served yet, or csi-provisioner may not list and watch volumesnapshots or list volumesnapshotcontents (%s); retried, and picked up without a restart once it is",
				snapshotGroup, api.State())
		}
		return p.snapshotSource(ctx, claim, ref.Name)
	}
	if p.deps.Sources.Events != nil {
		p.deps.Sources.Events.Eventf(claim, v1.EventTypeNormal, reasonPopulator,
			"Assuming an external populator will provision the volume from data source %s %q (API group %q)", ref.Kind, ref.Name, ref.Group)
	}
	return nil, &controller.IgnoredError{Reason: fmt.Sprintf("data source %s.%s %q is not handled by the provisioner, assuming an external populator will provision it",
		ref.Kind, ref.Group, ref.Name)}
}

// cloneSource checks a clone's source claim and its volume.
func (p *Provisioner) cloneSource(claim *v1.PersistentVolumeClaim, name string) (*dataSource, error) {
	src := &dataSource{kind: kindClaim, namespace: claim.Namespace, name: name}
	if p.deps.Sources.Claims == nil || p.deps.Sources.Volumes == nil {
		return nil, refused("cloning is not wired in this csi-provisioner (no claim and volume listers)")
	}
	source, err := p.deps.Sources.Claims.PersistentVolumeClaims(claim.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, refused("the source claim %s does not exist", src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading source claim %s: %w", src, err)
	}
	if source.DeletionTimestamp != nil && !hasString(source.Finalizers, sourceprotection.FinalizerCloneSource) {
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
	pv, err := p.deps.Sources.Volumes.Get(source.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil, refused("the volume %q of the source claim %s does not exist", source.Spec.VolumeName, src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading volume %q of source claim %s: %w", source.Spec.VolumeName, src, err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != p.cfg.DriverName {
		return nil, refused("the source claim %s is a volume of another driver (%s); only volumes of CSI driver %q can be cloned here",
			src, volumeDriver(pv), p.cfg.DriverName)
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
	src.content = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: pv.Spec.CSI.VolumeHandle}}}
	src.affinity = pv.Spec.NodeAffinity
	return src, nil
}

// snapshotSource checks a restore's VolumeSnapshot and its content.
func (p *Provisioner) snapshotSource(ctx context.Context, claim *v1.PersistentVolumeClaim, name string) (*dataSource, error) {
	src := &dataSource{kind: kindSnapshot, namespace: claim.Namespace, name: name}
	snap, err := p.deps.Sources.Snapshots.VolumeSnapshots(claim.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, refused("the %s does not exist", src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", src, err)
	}
	if snap.DeletionTimestamp != nil && !hasString(snap.Finalizers, sourceprotection.FinalizerSnapshotSource) {
		return nil, refused("the %s is being deleted", src)
	}
	if snap.Status == nil || snap.Status.BoundVolumeSnapshotContentName == nil || *snap.Status.BoundVolumeSnapshotContentName == "" {
		return nil, refused("the %s is not bound to a VolumeSnapshotContent yet", src)
	}
	if snap.Status.ReadyToUse == nil || !*snap.Status.ReadyToUse {
		return nil, refused("the %s is not ready to use yet", src)
	}
	contentName := *snap.Status.BoundVolumeSnapshotContentName
	content, err := p.snapshotContent(ctx, contentName)
	if apierrors.IsNotFound(err) {
		return nil, refused("the VolumeSnapshotContent %q of the %s does not exist", contentName, src)
	}
	if err != nil {
		return nil, fmt.Errorf("reading VolumeSnapshotContent %q of %s: %w", contentName, src, err)
	}
	if ref := content.Spec.VolumeSnapshotRef; ref.UID != snap.UID || ref.Name != snap.Name || ref.Namespace != snap.Namespace {
		return nil, refused("the VolumeSnapshotContent %q of the %s is bound to another snapshot", contentName, src)
	}
	if content.Spec.Driver != p.cfg.DriverName {
		return nil, refused("the %s is a snapshot of CSI driver %q; only snapshots of %q can be restored here", src, content.Spec.Driver, p.cfg.DriverName)
	}
	if content.Status == nil || content.Status.SnapshotHandle == nil || *content.Status.SnapshotHandle == "" {
		return nil, refused("the VolumeSnapshotContent %q of the %s has no snapshot handle yet", contentName, src)
	}
	if want, size := claimSize(claim), restoreSize(snap, content); size != nil && want.Cmp(*size) < 0 {
		return nil, refused("the claim requests %s, less than the restore size %s of the %s", want.String(), size.String(), src)
	}
	if err := p.checkModeConversion(claim, content, src); err != nil {
		return nil, err
	}
	src.content = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: *content.Status.SnapshotHandle}}}
	src.affinity = p.snapshotAffinity(snap, content)
	return src, nil
}

// snapshotContent reads a VolumeSnapshotContent (see Sources.ContentReader).
func (p *Provisioner) snapshotContent(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error) {
	if r := p.deps.Sources.ContentReader; r != nil {
		return r(ctx, name)
	}
	return p.deps.Sources.SnapshotContents.Get(name)
}

// checkModeConversion refuses a restore into another volume mode than the
// snapshot's source had, unless the content allows it (upstream's rule).
func (p *Provisioner) checkModeConversion(claim *v1.PersistentVolumeClaim, content *snapv1.VolumeSnapshotContent, src *dataSource) error {
	if !p.cfg.PreventVolumeModeConversion || content.Spec.SourceVolumeMode == nil {
		return nil
	}
	want, had := volumeMode(claim.Spec.VolumeMode), *content.Spec.SourceVolumeMode
	if want == had {
		return nil
	}
	if allowed, err := strconv.ParseBool(content.Annotations[annAllowVolumeModeChange]); err == nil && allowed {
		return nil
	}
	return refused("the claim asks for volume mode %s but the %s was taken of a %s volume; set annotation %s=true on its VolumeSnapshotContent %q to allow the conversion",
		want, src, had, annAllowVolumeModeChange, content.Name)
}

// snapshotAffinity is the node affinity of the snapshot's source volume,
// when that volume still exists and is the one the snapshot was taken of;
// else nil (unknown: the restore is not narrowed, the driver decides).
// VolumeSnapshotContent has no field for the snapshot's own topology (CSI
// Snapshot.accessible_topology, KEP-5943) in the external-snapshotter
// client modules served up to v8.7.0; see topology.CopyReach.
func (p *Provisioner) snapshotAffinity(snap *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) *v1.VolumeNodeAffinity {
	claimName := snap.Spec.Source.PersistentVolumeClaimName
	if claimName == nil || p.deps.Sources.Claims == nil || p.deps.Sources.Volumes == nil {
		return nil
	}
	source, err := p.deps.Sources.Claims.PersistentVolumeClaims(snap.Namespace).Get(*claimName)
	if err != nil || source.Spec.VolumeName == "" {
		return nil
	}
	pv, err := p.deps.Sources.Volumes.Get(source.Spec.VolumeName)
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != p.cfg.DriverName {
		return nil
	}
	if h := content.Spec.Source.VolumeHandle; h != nil && *h != pv.Spec.CSI.VolumeHandle {
		return nil // the claim now has another volume
	}
	return pv.Spec.NodeAffinity
}

func restoreSize(snap *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) *resource.Quantity {
	if snap.Status != nil && snap.Status.RestoreSize != nil {
		return snap.Status.RestoreSize
	}
	if content.Status != nil && content.Status.RestoreSize != nil {
		return resource.NewQuantity(*content.Status.RestoreSize, resource.BinarySI)
	}
	return nil
}

func claimSize(claim *v1.PersistentVolumeClaim) resource.Quantity {
	return claim.Spec.Resources.Requests[v1.ResourceStorage]
}

func volumeMode(m *v1.PersistentVolumeMode) v1.PersistentVolumeMode {
	if m == nil {
		return v1.PersistentVolumeFilesystem
	}
	return *m
}

func volumeDriver(pv *v1.PersistentVolume) string {
	if pv.Spec.CSI != nil {
		return fmt.Sprintf("CSI driver %q", pv.Spec.CSI.Driver)
	}
	return "an in-tree volume plugin"
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkContentSource makes sure the driver made the volume from the source
// (CSI: a volume created from a content source reports it): a volume made
// empty instead is deleted again, and the claim's Event says so.
func (p *Provisioner) checkContentSource(req *createRequest, vol *csi.Volume) error {
	if req.source == nil || vol.GetContentSource() != nil {
		return nil
	}
	return fmt.Errorf("CSI driver %q created volume %q without reporting its content source %s; the volume may be empty, so it is deleted again",
		p.cfg.DriverName, vol.GetVolumeId(), req.source)
}

// Sources are the optional collaborators of data sources and
// VolumeAttributesClasses. A nil lister turns its feature off: claims that
// need it are refused with an Event that says why.
type Sources struct {
	// Claims and Volumes read a clone's source claim and its volume (and a
	// snapshot's source volume, for its topology).
	Claims  corelisters.PersistentVolumeClaimLister
	Volumes corelisters.PersistentVolumeLister
	// Snapshots and SnapshotContents read VolumeSnapshot sources; nil when
	// the driver cannot restore snapshots. SnapshotAPI, when set, says
	// whether their informers run and have synced (nil: always).
	Snapshots        snaplisters.VolumeSnapshotLister
	SnapshotContents snaplisters.VolumeSnapshotContentLister
	SnapshotAPI      *optionalapi.API
	// ContentReader, when set, reads a restore's VolumeSnapshotContent
	// instead of SnapshotContents: wireSources reads it from the informer,
	// or with a GET per restore where RBAC refuses to let the contents be
	// watched (upstream's rbac.yaml grants get and list only).
	ContentReader func(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error)
	// AttributesClasses reads VolumeAttributesClasses; nil when the
	// VolumeAttributesClass feature gate is off. AttributesClassAPI, when
	// set, says whether its informer runs and has synced (nil: always).
	AttributesClasses  storagelisters.VolumeAttributesClassLister
	AttributesClassAPI *optionalapi.API
	// AttributesClassGetter, when set, reads a claim's
	// VolumeAttributesClass from the API (a GET per claim, as upstream
	// does) while RBAC refuses to let them be listed and watched
	// (AttributesClassAPI is Forbidden).
	AttributesClassGetter func(ctx context.Context, name string) (*storagev1.VolumeAttributesClass, error)
	// Protection puts the source-protection finalizers on sources before
	// CreateVolume; nil: sources are not protected.
	Protection *sourceprotection.Controller
	// Events posts the Event of a claim left to a volume populator.
	Events record.EventRecorder
}

// protectSource puts the source's finalizer on it before CreateVolume.
func (p *Provisioner) protectSource(ctx context.Context, src *dataSource) error {
	if src == nil || p.deps.Sources.Protection == nil {
		return nil
	}
	return p.deps.Sources.Protection.Protect(ctx, src.key())
}
