package sourceprotection

import (
	"context"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// SnapshotInformers watch VolumeSnapshots and VolumeSnapshotContents. They
// are built here rather than by the snapshot client's generated factory so
// that a client that does not support watch-list semantics (as its fake
// clientset) is listed and watched the classic way.
type SnapshotInformers struct {
	Snapshots, Contents cache.SharedIndexInformer
}

// NewSnapshotInformers returns the informers; start them with Run.
func NewSnapshotInformers(client snapclientset.Interface, resync time.Duration) SnapshotInformers {
	snaps := client.SnapshotV1()
	snapLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return snaps.VolumeSnapshots(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return snaps.VolumeSnapshots(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	contentLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return snaps.VolumeSnapshotContents().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return snaps.VolumeSnapshotContents().Watch(ctx, o)
		},
	}
	return SnapshotInformers{
		Snapshots: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(snapLW, client), &snapv1.VolumeSnapshot{}, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		Contents: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(contentLW, client), &snapv1.VolumeSnapshotContent{}, resync,
			cache.Indexers{}),
	}
}

// SnapshotLister reads VolumeSnapshots from the informer.
func (s SnapshotInformers) SnapshotLister() snaplisters.VolumeSnapshotLister {
	return snaplisters.NewVolumeSnapshotLister(s.Snapshots.GetIndexer())
}

// ContentLister reads VolumeSnapshotContents from the informer.
func (s SnapshotInformers) ContentLister() snaplisters.VolumeSnapshotContentLister {
	return snaplisters.NewVolumeSnapshotContentLister(s.Contents.GetIndexer())
}

// Run runs both informers until ctx is done.
func (s SnapshotInformers) Run(ctx context.Context) {
	go s.Snapshots.RunWithContext(ctx)
	go s.Contents.RunWithContext(ctx)
}

// HasSynced reports whether both informers have listed everything.
func (s SnapshotInformers) HasSynced() bool {
	return s.Snapshots.HasSynced() && s.Contents.HasSynced()
}
