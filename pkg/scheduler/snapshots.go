package scheduler

import (
	"context"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// snapshotLister implements SnapshotSource on a VolumeSnapshot lister.
type snapshotLister struct {
	l snaplisters.VolumeSnapshotLister
}

// NewSnapshotSource returns a SnapshotSource reading the lister.
func NewSnapshotSource(l snaplisters.VolumeSnapshotLister) SnapshotSource { return snapshotLister{l} }

// SnapshotClaim implements SnapshotSource.
func (s snapshotLister) SnapshotClaim(namespace, name string) (string, bool) {
	snap, err := s.l.VolumeSnapshots(namespace).Get(name)
	if err != nil || snap.Spec.Source.PersistentVolumeClaimName == nil || *snap.Spec.Source.PersistentVolumeClaimName == "" {
		return "", false
	}
	return *snap.Spec.Source.PersistentVolumeClaimName, true
}

// SnapshotInformer returns an informer factory of VolumeSnapshots
// (snapshot.storage.k8s.io/v1) with the source the Core reads
// (Core.SetSnapshots), for the caller to start; managedFields are not
// cached. When the API does not serve VolumeSnapshots (their CRDs are not
// installed) or this client may not list them, it logs that once and
// returns nil: the snapshot rule is then off, and no informer retries in a
// loop. Cost: one List of at most one object.
func SnapshotInformer(ctx context.Context, client snapclient.Interface) (snapinformers.SharedInformerFactory, SnapshotSource, error) {
	logger := klog.FromContext(ctx)
	_, err := client.SnapshotV1().VolumeSnapshots(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("VolumeSnapshots are not served (snapshot CRDs not installed): restores are not kept in reach of their snapshot's volume",
			"group", snapshotv1.GroupName)
		return nil, nil, nil
	case apierrors.IsForbidden(err):
		logger.Info("VolumeSnapshots may not be listed: restores are not kept in reach of their snapshot's volume", "err", err)
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("listing VolumeSnapshots: %w", err)
	}
	factory := snapinformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		snapinformers.WithTransform(func(obj any) (any, error) {
			if snap, ok := obj.(*snapshotv1.VolumeSnapshot); ok {
				snap.ManagedFields = nil
			}
			return obj, nil
		}))
	return factory, NewSnapshotSource(factory.Snapshot().V1().VolumeSnapshots().Lister()), nil
}
