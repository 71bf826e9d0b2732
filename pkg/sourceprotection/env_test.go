package sourceprotection

import (
	"context"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
)

// env is a Controller over fake clientsets whose informers run, have
// synced and watch claims and snapshots; Run is the test's to call.
type env struct {
	ctx        context.Context
	client     *fake.Clientset
	snap       *snapfake.Clientset
	snapshots  snaplisters.VolumeSnapshotLister
	protection *Controller
}

// noWatchList tells the informers that the snapshot fake clientset (built
// by an older client-gen) does not support watch-list semantics.
type noWatchList struct{ *snapfake.Clientset }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func newEnv(t *testing.T, objs, snapObjs []runtime.Object) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	cs := fake.NewClientset(objs...)
	snapCS := snapfake.NewSimpleClientset(snapObjs...)
	// The snapshot fake (an older client-gen) does not even pass on the
	// final state of what changed before its watch opened.
	claimsWatched := fakewatch.Opened(t, &cs.Fake, "persistentvolumeclaims")
	snapsWatched := fakewatch.Opened(t, &snapCS.Fake, "volumesnapshots")
	factory := informers.NewSharedInformerFactory(cs, 0)
	claims := factory.Core().V1().PersistentVolumeClaims()
	snaps := NewSnapshotInformers(noWatchList{snapCS}, 0)
	prot, err := New(Config{
		Claims: claims.Informer(), ClaimLister: claims.Lister(), ClaimClient: cs.CoreV1(),
		Snapshots: snaps.Snapshots, SnapshotLister: snaps.SnapshotLister(), SnapshotClient: snapCS.SnapshotV1(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	factory.Start(ictx.Done())
	snaps.Run(ictx)
	if !cache.WaitForCacheSync(ictx.Done(), snaps.HasSynced) {
		t.Fatal("snapshot informers did not sync")
	}
	for typ, ok := range factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	claimsWatched()
	snapsWatched()
	return &env{ctx: ctx, client: cs, snap: snapCS, snapshots: snaps.SnapshotLister(), protection: prot}
}

type claimBuilder struct{ *v1.PersistentVolumeClaim }

// makePVC is a pending claim of 1Gi in namespace apps.
func makePVC(name string) claimBuilder {
	return claimBuilder{&v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: resource.MustParse("1Gi"),
			}},
		},
	}}
}

func (c claimBuilder) cloneOf(name string) claimBuilder {
	c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: kindClaim, Name: name}
	c.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: kindClaim, Name: name}
	return c
}

func (c claimBuilder) restoreOf(name string) claimBuilder {
	g := snapshotGroup
	c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: &g, Kind: kindSnapshot, Name: name}
	c.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: &g, Kind: kindSnapshot, Name: name}
	return c
}

// boundSource is the Bound claim "src".
func boundSource() *v1.PersistentVolumeClaim {
	claim := makePVC("src").PersistentVolumeClaim
	claim.Spec.VolumeName = "pv-src"
	claim.Status.Phase = v1.ClaimBound
	return claim
}

// readySnapshot is the VolumeSnapshot "snap" of claim "src", ready to use.
func readySnapshot() *snapv1.VolumeSnapshot {
	srcClaim, ready := "src", true
	return &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "apps", UID: types.UID("uid-snap")},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &srcClaim}},
		Status:     &snapv1.VolumeSnapshotStatus{ReadyToUse: &ready},
	}
}
