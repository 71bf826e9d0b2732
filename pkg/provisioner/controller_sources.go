package provisioner

import (
	"context"
	"time"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/datasource"
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
		sa := datasource.NewSnapshotAPI(c, si, cfg.Sources.ProbeInterval)
		w.sources.ContentReader = sa.Content
		w.sources.SnapshotAPI = sa.API()
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
				return optionalapi.ProbeWatch(ctx, vacs.Watch, list.ResourceVersion)
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

// start follows the optional APIs; it never waits for them.
func (w *sourceWiring) start(ctx context.Context) {
	for _, api := range w.apis {
		go api.Run(ctx)
	}
}
