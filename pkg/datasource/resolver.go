package datasource

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Config is what a Resolver reads. A nil lister turns its feature off:
// claims that need it are refused, and the error says why.
type Config struct {
	// DriverName is the CSI driver's name: sources of other drivers are
	// refused.
	DriverName string
	// SupportsClone and SupportsSnapshot are the driver's CLONE_VOLUME and
	// CREATE_DELETE_SNAPSHOT controller capabilities.
	SupportsClone, SupportsSnapshot bool
	// PreventVolumeModeConversion refuses a restore into another volume
	// mode than the snapshot's source had (upstream's
	// --prevent-volume-mode-conversion).
	PreventVolumeModeConversion bool
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
	// instead of SnapshotContents (SnapshotAPI.Content).
	ContentReader func(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error)
	// CSINode returns a node's CSINode, nil when there is none: the
	// topology keys the driver reports on the node. Required.
	CSINode func(name string) *storagev1.CSINode
	// Events posts the Event of a claim left to a volume populator
	// (upstream's reason, contract.ReasonProvisioning). nil: no Event.
	Events record.EventRecorder
}

// Resolver resolves claims' data sources from listers. It keeps no state
// of its own and is safe for concurrent use.
type Resolver struct {
	cfg Config
}

// New returns a Resolver reading what cfg names.
func New(cfg Config) *Resolver {
	return &Resolver{cfg: cfg}
}

// snapshotAPIWait bounds how long a restore waits for the VolumeSnapshot
// API to be probed and its informers synced, when the API was missing.
const snapshotAPIWait = 5 * time.Second

// Resolve checks a claim's data source and returns what CreateVolume and
// the topology requirements need of it; nil without a data source. A
// populator's kind returns a *controller.IgnoredError after a Normal Event:
// the populator makes the volume. Refusals wrap ErrRefused (or
// ErrInvalidClaim for what the claim itself gets wrong). Where the copy may
// be made follows the rule of topology.CopyReach, with the class's
// topology.AnnCopyPlacement.
func (r *Resolver) Resolve(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (*Source, error) {
	src, err := r.resolveObject(ctx, claim)
	if src == nil || err != nil {
		return src, err
	}
	placement, err := topology.ClassCopyPlacement(class)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	src.Reach, src.Basis = topology.CopyReach(topology.Copy{Restore: src.Kind == KindSnapshot, Affinity: src.Affinity, Placement: placement},
		topology.CSINodeKeys(r.cfg.CSINode, r.cfg.DriverName))
	return src, nil
}

// resolveObject checks the claim's data source object (see Resolve) and
// reads its source volume's affinity.
func (r *Resolver) resolveObject(ctx context.Context, claim *v1.PersistentVolumeClaim) (*Source, error) {
	ref := sourceprotection.ClaimRef(claim)
	switch {
	case ref == nil:
		return nil, nil
	case ref.Namespace != "":
		return nil, fmt.Errorf("%w: a data source in another namespace (dataSourceRef %s %q in namespace %q) is not supported by this csi-provisioner (upstream's alpha CrossNamespaceVolumeDataSource)",
			ErrInvalidClaim, ref.Kind, ref.Name, ref.Namespace)
	case ref.Name == "":
		return nil, fmt.Errorf("%w: the data source %s has no name", ErrInvalidClaim, ref.Kind)
	case ref.Group == "" && ref.Kind == KindClaim:
		if !r.cfg.SupportsClone {
			return nil, refused("CSI driver %q cannot clone volumes (it lacks the CLONE_VOLUME controller capability)", r.cfg.DriverName)
		}
		return r.cloneSource(claim, ref.Name)
	case ref.Group == snapshotGroup && ref.Kind == KindSnapshot:
		if !r.cfg.SupportsSnapshot {
			return nil, refused("CSI driver %q cannot restore snapshots (it lacks the CREATE_DELETE_SNAPSHOT controller capability)", r.cfg.DriverName)
		}
		if r.cfg.Snapshots == nil {
			return nil, refused("snapshot restores are not wired in this csi-provisioner (no VolumeSnapshot client)")
		}
		if api := r.cfg.SnapshotAPI; api != nil && !api.WaitReady(ctx, snapshotAPIWait) {
			return nil, refused("the VolumeSnapshot API (%s/v1) is not served yet, or csi-provisioner may not list and watch volumesnapshots or list volumesnapshotcontents (%s); retried, and picked up without a restart once it is",
				snapshotGroup, api.State())
		}
		return r.snapshotSource(ctx, claim, ref.Name)
	}
	if r.cfg.Events != nil {
		r.cfg.Events.Eventf(claim, v1.EventTypeNormal, contract.ReasonProvisioning,
			"Assuming an external populator will provision the volume from data source %s %q (API group %q)", ref.Kind, ref.Name, ref.Group)
	}
	return nil, &controller.IgnoredError{Reason: fmt.Sprintf("data source %s.%s %q is not handled by the provisioner, assuming an external populator will provision it",
		ref.Kind, ref.Group, ref.Name)}
}

// CheckCreated makes sure the driver made the volume from the source (CSI:
// a volume created from a content source reports it); nil without a
// source. The caller deletes a volume made empty instead, and the claim's
// Event says so.
func (r *Resolver) CheckCreated(src *Source, vol *csi.Volume) error {
	if src == nil || vol.GetContentSource() != nil {
		return nil
	}
	return fmt.Errorf("CSI driver %q created volume %q without reporting its content source %s; the volume may be empty, so it is deleted again",
		r.cfg.DriverName, vol.GetVolumeId(), src)
}
