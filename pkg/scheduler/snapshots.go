package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
)

// Errors of SnapshotSource.SnapshotClaim: the snapshot's claim is not known
// yet, and a restore waits for it rather than be placed blindly.
var (
	// ErrSnapshotsNotServed: the API does not serve VolumeSnapshots (yet).
	ErrSnapshotsNotServed = errors.New("the VolumeSnapshot API (snapshot.storage.k8s.io/v1) is not served yet (snapshot CRDs not installed)")
	// ErrSnapshotNotFound: the snapshot does not exist (yet).
	ErrSnapshotNotFound = errors.New("the VolumeSnapshot does not exist yet")
)

// snapshotProbeInterval bounds the time between two probes of a missing
// VolumeSnapshot API.
const snapshotProbeInterval = 10 * time.Second

// snapshotLister implements SnapshotSource on a VolumeSnapshot lister that
// api, when set, says whether to trust.
type snapshotLister struct {
	l   snaplisters.VolumeSnapshotLister
	api *optionalapi.API
}

// NewSnapshotSource returns a SnapshotSource reading a synced lister.
func NewSnapshotSource(l snaplisters.VolumeSnapshotLister) SnapshotSource {
	return snapshotLister{l: l}
}

// SnapshotClaim implements SnapshotSource. While the API is not ready it
// returns ErrSnapshotsNotServed and pokes the API, so that a restore is
// probed for at once; while RBAC forbids reading snapshots it returns ""
// (the rule is off, as the process said once in its log).
func (s snapshotLister) SnapshotClaim(namespace, name string) (string, error) {
	if s.api != nil && !s.api.Ready() {
		if s.api.State() == optionalapi.Forbidden {
			return "", nil
		}
		s.api.Poke()
		return "", ErrSnapshotsNotServed
	}
	snap, err := s.l.VolumeSnapshots(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return "", ErrSnapshotNotFound
	}
	if err != nil || snap.Spec.Source.PersistentVolumeClaimName == nil {
		return "", nil
	}
	return *snap.Spec.Source.PersistentVolumeClaimName, nil
}

// Snapshots is the VolumeSnapshot informer the Core follows restores with,
// started when the API serves VolumeSnapshots: at start-up, or whenever the
// snapshot CRDs are installed later.
type Snapshots struct {
	// API says whether the informer runs and has synced; Run it.
	API *optionalapi.API
	// Source is the Core's view (Listers.Snapshots).
	Source SnapshotSource
	// Informer is the VolumeSnapshot informer; event handlers added before
	// API.Run see every snapshot once it starts.
	Informer cache.SharedIndexInformer
}

// SnapshotInformer returns the VolumeSnapshot informer (snapshot.storage.k8s.io/v1,
// without managedFields) of a Core, an optional API: until the API serves
// VolumeSnapshots a restore waits (ErrSnapshotsNotServed), and while this
// client may not list them the snapshot rule is off. Each is said once in
// the log; Run the API to follow it.
func SnapshotInformer(client snapclient.Interface) Snapshots {
	factory := snapinformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		snapinformers.WithTransform(func(obj any) (any, error) {
			if snap, ok := obj.(*snapshotv1.VolumeSnapshot); ok {
				snap.ManagedFields = nil
			}
			return obj, nil
		}))
	inf := factory.Snapshot().V1().VolumeSnapshots()
	s := Snapshots{Informer: inf.Informer()}
	s.API = optionalapi.New(optionalapi.Config{
		What:    fmt.Sprintf("VolumeSnapshots (%s/v1)", snapshotv1.GroupName),
		Without: "pods with claims restoring a snapshot wait for it (or, when forbidden, restores are not kept in reach of their snapshot's volume)",
		Probe: func(ctx context.Context) error {
			_, err := client.SnapshotV1().VolumeSnapshots(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		Start:     func(ctx context.Context) { factory.Start(ctx.Done()) },
		HasSynced: s.Informer.HasSynced,
		// One scheduler (or a few extender replicas) probes: often enough
		// that the CRDs are usually picked up before a snapshot exists.
		MaxInterval: snapshotProbeInterval,
	})
	s.Source = snapshotLister{l: inf.Lister(), api: s.API}
	return s
}
