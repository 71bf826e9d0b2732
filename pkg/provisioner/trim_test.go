package provisioner

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	now := metav1.Now()
	fullNode := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", CreationTimestamp: now,
			Labels: map[string]string{"topology.example.com/zone": "z1"}, Annotations: map[string]string{"a": "b"}, ManagedFields: managed},
		Spec: v1.NodeSpec{ProviderID: "fake://n1"},
		Status: v1.NodeStatus{
			Allocatable: v1.ResourceList{v1.ResourcePods: resource.MustParse("110")},
			Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			Images:      []v1.ContainerImage{{Names: []string{"img"}}},
		},
	}
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Annotations: map[string]string{annSelectedNode: "n1"}, ManagedFields: managed},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: "pv"},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
	tests := []struct {
		name string
		in   any
		want any
	}{
		{
			name: "node keeps name, UID, version, timestamps and labels only",
			in:   fullNode,
			want: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", CreationTimestamp: now,
				Labels: map[string]string{"topology.example.com/zone": "z1"}}},
		},
		{
			name: "claim loses managedFields only",
			in:   claim.DeepCopy(),
			want: func() *v1.PersistentVolumeClaim { c := claim.DeepCopy(); c.ManagedFields = nil; return c }(),
		},
		{
			name: "not an object",
			in:   "tombstone",
			want: "tombstone",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TrimForCache(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("TrimForCache (-want +got):\n%s", diff)
			}
			again, _ := TrimForCache(got)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("TrimForCache is not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}

// TestMetadataNodeInformer: with a metadata client the Node informer serves
// trimmed *v1.Node objects (labels kept) to listers and handlers.
func TestMetadataNodeInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	node := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "z1"}, Annotations: map[string]string{"a": "b"}},
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, node)
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	inf, own := newNodeInformer(meta, factory, 0, nil)
	if !own {
		t.Fatal("a metadata client must give the provisioner its own Node informer")
	}
	added := make(chan *v1.Node, 1)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if n, ok := obj.(*v1.Node); ok {
			added <- n
		}
	}}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("Node informer did not sync")
	}
	got, err := corelisters.NewNodeLister(inf.GetIndexer()).Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "z1"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lister (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, <-added); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if _, own := newNodeInformer(nil, factory, 0, nil); own {
		t.Error("without a metadata client the Node informer is the factory's")
	}
}
