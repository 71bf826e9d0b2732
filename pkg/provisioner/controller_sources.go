package provisioner

import (
	"context"
	"sync/atomic"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// SourcesConfig says which data-source APIs csi-provisioner follows; see
// ControllerConfig.Sources. Both are optional APIs (internal/optionalapi):
// they are probed until the API serves them and this client may read them,
// and only then are their informers started, so that the snapshot CRDs
// (an add-on often installed after the driver) and a Role granted later are
// picked up without a restart, and no cache sync waits on them.
type SourcesConfig struct {
	// Snapshots is the VolumeSnapshot client; nil when the driver cannot
	// restore snapshots (claims restoring one are then refused).
	Snapshots snapclientset.Interface
	// AttributesClasses says that claims naming a VolumeAttributesClass
	// are served (the VolumeAttributesClass feature gate).
	AttributesClasses bool
	// ProtectionWorkers is the number of sources whose finalizer is checked
	// at once (upstream's --cloning-protection-threads). Default 1.
	ProtectionWorkers int
	// ProbeInterval bounds the time between two probes of a missing
	// optional API (optionalapi.Config.MaxInterval); a claim that needs the
	// API probes it at once. Default 1m.
	ProbeInterval time.Duration
}

// sourceWiring is what NewController wires for data sources.
type sourceWiring struct {
	sources    Sources
	broadcast  record.EventBroadcaster
	protection *sourceprotection.Controller
	// apis are the optional APIs to follow (Sources.SnapshotAPI,
	// Sources.AttributesClassAPI), run by start.
	apis []*optionalapi.API
}

// wireSources registers the informers, listers and the protection
// controller of data sources, and the optional APIs of VolumeSnapshots and
// VolumeAttributesClasses (not started yet).
func wireSources(ctx context.Context, cfg ControllerConfig, clients Clients, factory informers.SharedInformerFactory) (*sourceWiring, error) {
	w := &sourceWiring{}
	claims := factory.Core().V1().PersistentVolumeClaims()
	w.sources.Claims = claims.Lister()
	w.sources.Volumes = factory.Core().V1().PersistentVolumes().Lister()
	pc := sourceprotection.Config{Claims: claims.Informer(), ClaimLister: claims.Lister(), ClaimClient: clients.Work.CoreV1(),
		Workers: cfg.Sources.ProtectionWorkers}
	if c := cfg.Sources.Snapshots; c != nil {
		si := sourceprotection.NewSnapshotInformers(c, cfg.ResyncPeriod)
		w.sources.Snapshots, w.sources.SnapshotContents = si.SnapshotLister(), si.ContentLister()
		pc.Snapshots, pc.SnapshotLister, pc.SnapshotClient = si.Snapshots, si.SnapshotLister(), c.SnapshotV1()
		sw := &snapshotWiring{client: c, informers: si}
		w.sources.ContentReader = sw.content
		w.sources.SnapshotAPI = sw.api(cfg.Sources.ProbeInterval)
		pc.SnapshotAPI = w.sources.SnapshotAPI
		w.apis = append(w.apis, w.sources.SnapshotAPI)
	}
	if cfg.Sources.AttributesClasses {
		// A factory of its own: its cache sync must not hold up the others.
		vf := informers.NewSharedInformerFactory(clients.Work, cfg.ResyncPeriod)
		inf := vf.Storage().V1().VolumeAttributesClasses()
		vacs := clients.Work.StorageV1().VolumeAttributesClasses()
		w.sources.AttributesClasses = inf.Lister()
		w.sources.AttributesClassGetter = func(ctx context.Context, name string) (*storagev1.VolumeAttributesClass, error) {
			return vacs.Get(ctx, name, metav1.GetOptions{})
		}
		w.sources.AttributesClassAPI = optionalapi.New(optionalapi.Config{
			What: "VolumeAttributesClasses (storage.k8s.io/v1)",
			Without: "a claim naming a VolumeAttributesClass reads it with a GET, as upstream external-provisioner does (RBAC needs get on volumeattributesclasses; " +
				"list and watch to cache them); claims wait while the API is not served (Kubernetes 1.34 serves it)",
			Probe: func(ctx context.Context) error {
				list, err := vacs.List(ctx, metav1.ListOptions{Limit: 1})
				if err != nil {
					return err
				}
				return probeWatch(ctx, vacs.Watch, list.ResourceVersion)
			},
			Start:       func(ctx context.Context) { vf.Start(ctx.Done()) },
			HasSynced:   inf.Informer().HasSynced,
			MaxInterval: cfg.Sources.ProbeInterval,
		})
		w.apis = append(w.apis, w.sources.AttributesClassAPI)
	}
	var err error
	if w.protection, err = sourceprotection.New(pc); err != nil {
		return nil, err
	}
	w.sources.Protection = w.protection
	w.broadcast = record.NewBroadcaster(record.WithContext(ctx))
	w.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clients.Events.CoreV1().Events(v1.NamespaceAll)})
	w.sources.Events = w.broadcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: cfg.Provisioner.DriverName})
	klog.FromContext(ctx).Info("Data sources", "snapshots", cfg.Sources.Snapshots != nil, "volumeAttributesClasses", cfg.Sources.AttributesClasses)
	return w, nil
}

// probeWatch opens a watch the way an informer would after its list, and
// closes it at once: RBAC may grant list and not watch, and an informer
// refused its watch would list everything again and again.
func probeWatch(ctx context.Context, watch func(context.Context, metav1.ListOptions) (watch.Interface, error), resourceVersion string) error {
	timeout := int64(1)
	w, err := watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}

// snapshotWiring follows VolumeSnapshots and VolumeSnapshotContents as one
// optional API: both must be served and readable. Where RBAC lets the
// contents be listed but not watched (upstream external-provisioner's
// rbac.yaml), their informer does not run and a restore reads its content
// with a GET, as upstream does.
type snapshotWiring struct {
	client    snapclientset.Interface
	informers sourceprotection.SnapshotInformers
	// contentsByGet: the contents may not be watched.
	contentsByGet atomic.Bool
}

func (s *snapshotWiring) api(interval time.Duration) *optionalapi.API {
	return optionalapi.New(optionalapi.Config{
		What:    "VolumeSnapshots and VolumeSnapshotContents (snapshot.storage.k8s.io/v1)",
		Without: "claims restoring a snapshot wait (snapshot CRDs not installed, or RBAC lacks list and watch on volumesnapshots, or list on volumesnapshotcontents)",
		Probe:   s.probe,
		Start: func(ctx context.Context) {
			go s.informers.Snapshots.RunWithContext(ctx)
			if !s.contentsByGet.Load() {
				go s.informers.Contents.RunWithContext(ctx)
			}
		},
		HasSynced: func() bool {
			return s.informers.Snapshots.HasSynced() && (s.contentsByGet.Load() || s.informers.Contents.HasSynced())
		},
		MaxInterval: interval,
	})
}

// probe lists and watches snapshots and contents as the informers will; a
// watch of contents that RBAC refuses switches contents to GETs, said once.
func (s *snapshotWiring) probe(ctx context.Context) error {
	o := metav1.ListOptions{Limit: 1}
	snaps := s.client.SnapshotV1().VolumeSnapshots(metav1.NamespaceAll)
	list, err := snaps.List(ctx, o)
	if err != nil {
		return err
	}
	if err := probeWatch(ctx, snaps.Watch, list.ResourceVersion); err != nil {
		return err
	}
	contents := s.client.SnapshotV1().VolumeSnapshotContents()
	clist, err := contents.List(ctx, o)
	if err != nil {
		return err
	}
	err = probeWatch(ctx, contents.Watch, clist.ResourceVersion)
	if apierrors.IsForbidden(err) {
		if !s.contentsByGet.Swap(true) {
			klog.FromContext(ctx).Info("VolumeSnapshotContents may not be watched (RBAC); a restore reads its VolumeSnapshotContent with a GET, as upstream does: grant watch on volumesnapshotcontents to cache them",
				"err", err)
		}
		return nil
	}
	return err
}

// content reads a VolumeSnapshotContent: from the informer, or with a GET
// where the contents may not be watched.
func (s *snapshotWiring) content(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error) {
	if s.contentsByGet.Load() {
		return s.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}
	return s.informers.ContentLister().Get(name)
}

// start follows the optional APIs; it never waits for them.
func (w *sourceWiring) start(ctx context.Context) {
	for _, api := range w.apis {
		go api.Run(ctx)
	}
}
