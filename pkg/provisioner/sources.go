package provisioner

import (
	"context"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	storagev1 "k8s.io/api/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/record"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/datasource"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

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

// newResolver resolves data sources (package datasource) from the
// listers of deps.Sources, as cfg allows.
func newResolver(cfg Config, deps Deps) *datasource.Resolver {
	s := deps.Sources
	return datasource.New(datasource.Config{
		DriverName: cfg.DriverName, PreventVolumeModeConversion: cfg.PreventVolumeModeConversion,
		SupportsClone: cfg.SupportsClone, SupportsSnapshot: cfg.SupportsSnapshot,
		Claims: s.Claims, Volumes: s.Volumes, Snapshots: s.Snapshots, SnapshotContents: s.SnapshotContents,
		SnapshotAPI: s.SnapshotAPI, ContentReader: s.ContentReader, Events: s.Events,
		CSINode: func(name string) *storagev1.CSINode {
			n, err := deps.CSINodes.Get(name)
			if err != nil {
				return nil
			}
			return n
		},
	})
}

// protectSource puts the source's finalizer on it before CreateVolume.
func (p *Provisioner) protectSource(ctx context.Context, src *datasource.Source) error {
	if src == nil || p.deps.Sources.Protection == nil {
		return nil
	}
	return p.deps.Sources.Protection.Protect(ctx, src.Key())
}
