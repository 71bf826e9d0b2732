package provisioner

import (
	"context"
	"fmt"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// SourcesConfig says which data-source APIs the cluster serves; see
// ControllerConfig.Sources.
type SourcesConfig struct {
	// Snapshots is the VolumeSnapshot client; nil when the cluster has no
	// snapshot.storage.k8s.io/v1 API (claims restoring a snapshot are then
	// refused).
	Snapshots snapclientset.Interface
	// AttributesClasses says that the API serves storage.k8s.io/v1
	// VolumeAttributesClass (claims naming one are refused otherwise).
	AttributesClasses bool
	// ProtectionWorkers is the number of sources whose finalizer is checked
	// at once (upstream's --cloning-protection-threads). Default 1.
	ProtectionWorkers int
}

// sourceWiring is what NewController wires for data sources.
type sourceWiring struct {
	sources    Sources
	snapshots  *SnapshotInformers
	broadcast  record.EventBroadcaster
	protection *SourceProtection
}

// wireSources registers the informers, listers and the protection
// controller of data sources and VolumeAttributesClasses on factory (not
// started yet).
func wireSources(ctx context.Context, cfg ControllerConfig, clients Clients, factory informers.SharedInformerFactory) (*sourceWiring, error) {
	w := &sourceWiring{}
	claims := factory.Core().V1().PersistentVolumeClaims()
	w.sources.Claims = claims.Lister()
	w.sources.Volumes = factory.Core().V1().PersistentVolumes().Lister()
	pc := SourceProtectionConfig{Claims: claims.Informer(), ClaimLister: claims.Lister(), ClaimClient: clients.Work.CoreV1(),
		Workers: cfg.Sources.ProtectionWorkers}
	if c := cfg.Sources.Snapshots; c != nil {
		si := NewSnapshotInformers(c, cfg.ResyncPeriod)
		w.snapshots = &si
		w.sources.Snapshots, w.sources.SnapshotContents = si.SnapshotLister(), si.ContentLister()
		pc.Snapshots, pc.SnapshotLister, pc.SnapshotClient = si.Snapshots, si.SnapshotLister(), c.SnapshotV1()
	}
	if cfg.Sources.AttributesClasses {
		w.sources.AttributesClasses = factory.Storage().V1().VolumeAttributesClasses().Lister()
	}
	var err error
	if w.protection, err = NewSourceProtection(pc); err != nil {
		return nil, err
	}
	w.sources.Protection = w.protection
	w.broadcast = record.NewBroadcaster(record.WithContext(ctx))
	w.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clients.Events.CoreV1().Events(v1.NamespaceAll)})
	w.sources.Events = w.broadcast.NewRecorder(scheme.Scheme, v1.EventSource{Component: cfg.Provisioner.DriverName})
	klog.FromContext(ctx).Info("Data sources", "snapshots", cfg.Sources.Snapshots != nil, "volumeAttributesClasses", cfg.Sources.AttributesClasses)
	return w, nil
}

// start runs the snapshot informers and waits for them.
func (w *sourceWiring) start(ctx context.Context) error {
	if w.snapshots == nil {
		return nil
	}
	w.snapshots.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), w.snapshots.HasSynced) {
		return fmt.Errorf("snapshot informers did not sync")
	}
	return nil
}

// SnapshotAPIServed reports whether the API serves VolumeSnapshots and
// VolumeSnapshotContents of snapshot.storage.k8s.io/v1 (the CRDs are
// installed).
func SnapshotAPIServed(client kubernetes.Interface) (bool, error) {
	return servesResources(client, "snapshot.storage.k8s.io/v1", "volumesnapshots", "volumesnapshotcontents")
}

// AttributesClassAPIServed reports whether the API serves storage.k8s.io/v1
// VolumeAttributesClass (Kubernetes 1.34 and later).
func AttributesClassAPIServed(client kubernetes.Interface) (bool, error) {
	return servesResources(client, "storage.k8s.io/v1", "volumeattributesclasses")
}

func servesResources(client kubernetes.Interface, groupVersion string, names ...string) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", groupVersion, err)
	}
	have := map[string]bool{}
	for _, r := range list.APIResources {
		have[r.Name] = true
	}
	for _, n := range names {
		if !have[n] {
			return false, nil
		}
	}
	return true, nil
}
