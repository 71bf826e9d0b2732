package datasource

import (
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

const ns = "apps"

// indexer holds objects as an informer's store does.
func indexer(t *testing.T, objs ...any) cache.Indexer {
	t.Helper()
	i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := i.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return i
}

// claim is a claim of size in ns, made from ref (nil: empty).
func claim(size string, ref *v1.TypedLocalObjectReference) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "copy", UID: "copy-uid"},
		Spec: v1.PersistentVolumeClaimSpec{DataSource: ref,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}}}}
}

func cloneRef(name string) *v1.TypedLocalObjectReference {
	return &v1.TypedLocalObjectReference{Kind: KindClaim, Name: name}
}

func snapRef(name string) *v1.TypedLocalObjectReference {
	return &v1.TypedLocalObjectReference{APIGroup: ptr.To(snapv1.GroupName), Kind: KindSnapshot, Name: name}
}

// sourceVolume is a bound 1Gi claim "src" and its PV "pv-src" (handle
// "vol-src") of testDriver, in zone z1.
func sourceVolume(phase v1.PersistentVolumeClaimPhase) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	c := claim("1Gi", nil)
	c.Name, c.UID, c.Spec.VolumeName, c.Status.Phase = "src", "src-uid", "pv-src", phase
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-src"},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-src"}},
			ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: "src", UID: "src-uid"},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}}}}}}}},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound}}
	return c, pv
}

// snapshot is a ready VolumeSnapshot "snap" of the claim "src", restore
// size 1Gi, taken of a Filesystem volume, and its content.
func snapshot() (*snapv1.VolumeSnapshot, *snapv1.VolumeSnapshotContent) {
	snap := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap", UID: "snap-uid"},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("src")}},
		Status: &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To("content"), ReadyToUse: ptr.To(true),
			RestoreSize: ptr.To(resource.MustParse("1Gi"))}}
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: "content"},
		Spec: snapv1.VolumeSnapshotContentSpec{Driver: testDriver, SourceVolumeMode: ptr.To(v1.PersistentVolumeFilesystem),
			Source:            snapv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("vol-src")},
			VolumeSnapshotRef: v1.ObjectReference{Namespace: ns, Name: "snap", UID: "snap-uid"}},
		Status: &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("snap-handle")}}
	return snap, content
}

// TestResolve checks a claim's data source as the Resolver reads it from
// its listers: what it refuses (and as what), what CreateVolume gets, and
// where the copy may be made.
func TestResolve(t *testing.T) {
	bound, pv := sourceVolume(v1.ClaimBound)
	pending, _ := sourceVolume(v1.ClaimPending)
	snap, content := snapshot()
	blockOK := content.DeepCopy()
	blockOK.Annotations = map[string]string{AnnAllowVolumeModeChange: "true"}
	block := func(c *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
		c.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
		return c
	}
	badClass := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "bad", Annotations: map[string]string{topology.AnnCopyPlacement: "near"}}}
	for _, tc := range []struct {
		name      string
		claim     *v1.PersistentVolumeClaim
		class     *storagev1.StorageClass
		noClone   bool
		objs      []any // claims and PVs
		contents  []any
		wantErr   error
		wantMsg   string
		wantEvent bool
		// want: the resolved source's content and basis.
		wantContent *csi.VolumeContentSource
		wantBasis   topology.CopyBasis
	}{
		{name: "no data source", claim: claim("1Gi", nil)},
		{name: "source in another namespace", claim: func() *v1.PersistentVolumeClaim {
			c := claim("1Gi", nil)
			c.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: KindClaim, Name: "src", Namespace: ptr.To("other")}
			return c
		}(), wantErr: ErrInvalidClaim, wantMsg: "a data source in another namespace"},
		{name: "source without a name", claim: claim("1Gi", cloneRef("")), wantErr: ErrInvalidClaim, wantMsg: "has no name"},
		{name: "clone without the capability", claim: claim("1Gi", cloneRef("src")), noClone: true, objs: []any{bound, pv},
			wantErr: ErrRefused, wantMsg: "lacks the CLONE_VOLUME controller capability"},
		{name: "clone of a pending claim", claim: claim("1Gi", cloneRef("src")), objs: []any{pending, pv},
			wantErr: ErrRefused, wantMsg: "is not bound to a volume yet"},
		{name: "clone smaller than its source", claim: claim("512Mi", cloneRef("src")), objs: []any{bound, pv},
			wantErr: ErrRefused, wantMsg: "a clone must be at least as large as its source"},
		{name: "clone of a bound claim", claim: claim("1Gi", cloneRef("src")), objs: []any{bound, pv},
			wantContent: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "vol-src"}}},
			wantBasis:   topology.BasisClone},
		{name: "class with an unknown copy placement", claim: claim("1Gi", cloneRef("src")), class: badClass, objs: []any{bound, pv},
			wantErr: topology.ErrInvalidCopyPlacement, wantMsg: "data source refused"},
		{name: "restore", claim: claim("1Gi", snapRef("snap")), objs: []any{bound, pv}, contents: []any{content},
			wantContent: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-handle"}}},
			wantBasis:   topology.BasisAnywhere},
		{name: "restore smaller than the restore size", claim: claim("512Mi", snapRef("snap")), contents: []any{content},
			wantErr: ErrRefused, wantMsg: "less than the restore size 1Gi"},
		{name: "restore into another volume mode", claim: block(claim("1Gi", snapRef("snap"))), contents: []any{content},
			wantErr: ErrRefused, wantMsg: "allow-volume-mode-change=true"},
		{name: "restore into another volume mode the content allows", claim: block(claim("1Gi", snapRef("snap"))), objs: []any{bound, pv}, contents: []any{blockOK},
			wantContent: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-handle"}}},
			wantBasis:   topology.BasisAnywhere},
		{name: "populator's kind", claim: claim("1Gi", &v1.TypedLocalObjectReference{APIGroup: ptr.To("example.com"), Kind: "Image", Name: "img"}),
			wantMsg: "assuming an external populator", wantEvent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			objs := indexer(t, tc.objs...)
			events := record.NewFakeRecorder(10)
			r := New(Config{DriverName: testDriver, SupportsClone: !tc.noClone, SupportsSnapshot: true, PreventVolumeModeConversion: true,
				Claims: corelisters.NewPersistentVolumeClaimLister(objs), Volumes: corelisters.NewPersistentVolumeLister(objs),
				Snapshots:        snaplisters.NewVolumeSnapshotLister(indexer(t, snap)),
				SnapshotContents: snaplisters.NewVolumeSnapshotContentLister(indexer(t, tc.contents...)),
				CSINode:          func(string) *storagev1.CSINode { return nil }, Events: events})
			src, err := r.Resolve(ctx, tc.claim, tc.class)
			var ignored *controller.IgnoredError
			switch {
			case tc.wantEvent:
				if !errors.As(err, &ignored) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("error = %v, want an IgnoredError saying %q", err, tc.wantMsg)
				}
				if len(events.Events) != 1 {
					t.Errorf("%d Events, want one for the populator", len(events.Events))
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("error = %v, want %v saying %q", err, tc.wantErr, tc.wantMsg)
				}
				return
			case err != nil:
				t.Fatalf("Resolve: %v", err)
			case tc.wantContent == nil:
				if src != nil {
					t.Fatalf("source = %v, want none", src)
				}
				return
			}
			if diff := cmp.Diff(tc.wantContent, src.Content, protocmp.Transform()); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			if src.Basis != tc.wantBasis || src.Affinity == nil {
				t.Errorf("basis %q, affinity %v; want %q and the source volume's affinity", src.Basis, src.Affinity, tc.wantBasis)
			}
		})
	}
}

// TestCheckCreated: a volume made from a source must report its content
// source; a volume without a source need not.
func TestCheckCreated(t *testing.T) {
	r := New(Config{DriverName: testDriver})
	src := &Source{Kind: KindClaim, Namespace: ns, Name: "src"}
	echoed := &csi.Volume{VolumeId: "v", ContentSource: &csi.VolumeContentSource{}}
	for _, tc := range []struct {
		name    string
		src     *Source
		vol     *csi.Volume
		wantErr string
	}{
		{name: "no source", vol: &csi.Volume{VolumeId: "v"}},
		{name: "source reported", src: src, vol: echoed},
		{name: "source not reported", src: src, vol: &csi.Volume{VolumeId: "v"},
			wantErr: `created volume "v" without reporting its content source PersistentVolumeClaim "apps/src"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.CheckCreated(tc.src, tc.vol)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("CheckCreated = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
