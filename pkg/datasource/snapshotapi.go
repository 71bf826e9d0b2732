package datasource

import (
	"context"
	"sync/atomic"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// SnapshotAPI follows VolumeSnapshots and VolumeSnapshotContents as one
// optional API: both must be served and readable. Where RBAC lets the
// contents be listed but not watched (upstream external-provisioner's
// rbac.yaml), their informer does not run and a restore reads its content
// with a GET, as upstream does. Safe for concurrent use.
type SnapshotAPI struct {
	client    snapclientset.Interface
	informers sourceprotection.SnapshotInformers
	// contentsByGet: the contents may not be watched.
	contentsByGet atomic.Bool
	api           *optionalapi.API
}

// NewSnapshotAPI follows the snapshot API of client with informers (not
// started: API's Run starts them once the API is readable). interval
// bounds the time between two probes of a missing API
// (optionalapi.Config.MaxInterval).
func NewSnapshotAPI(client snapclientset.Interface, informers sourceprotection.SnapshotInformers, interval time.Duration) *SnapshotAPI {
	s := &SnapshotAPI{client: client, informers: informers}
	s.api = optionalapi.New(optionalapi.Config{
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
	return s
}

// API is the optional API to run (Config.SnapshotAPI).
func (s *SnapshotAPI) API() *optionalapi.API { return s.api }

// probe lists and watches snapshots and contents as the informers will; a
// watch of contents that RBAC refuses switches contents to GETs, said once.
func (s *SnapshotAPI) probe(ctx context.Context) error {
	o := metav1.ListOptions{Limit: 1}
	snaps := s.client.SnapshotV1().VolumeSnapshots(metav1.NamespaceAll)
	list, err := snaps.List(ctx, o)
	if err != nil {
		return err
	}
	if err := optionalapi.ProbeWatch(ctx, snaps.Watch, list.ResourceVersion); err != nil {
		return err
	}
	contents := s.client.SnapshotV1().VolumeSnapshotContents()
	clist, err := contents.List(ctx, o)
	if err != nil {
		return err
	}
	err = optionalapi.ProbeWatch(ctx, contents.Watch, clist.ResourceVersion)
	if apierrors.IsForbidden(err) {
		if !s.contentsByGet.Swap(true) {
			klog.FromContext(ctx).Info("VolumeSnapshotContents may not be watched (RBAC); a restore reads its VolumeSnapshotContent with a GET, as upstream does: grant watch on volumesnapshotcontents to cache them",
				"err", err)
		}
		return nil
	}
	return err
}

// Content reads a VolumeSnapshotContent (Config.ContentReader): from the
// informer, or with a GET where the contents may not be watched.
func (s *SnapshotAPI) Content(ctx context.Context, name string) (*snapv1.VolumeSnapshotContent, error) {
	if s.contentsByGet.Load() {
		return s.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	}
	return s.informers.ContentLister().Get(name)
}
