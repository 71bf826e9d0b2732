package informercache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// TestMetadataNodeInformer: with a metadata client the Node informer caches
// each Node's trimmed metadata (labels kept); handlers see it as a
// metav1.Object and nodeLister serves it as a *v1.Node.
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
	factory := informers.NewSharedInformerFactory(fake.NewClientset(makeCSINode("n1", "zone")), 0)
	inf, own := NewNodeInformer(meta, factory, 0, nil)
	if !own {
		t.Fatal("a metadata client must give the provisioner its own Node informer")
	}
	index := topology.NewIndex(testDriver)
	indexSynced, err := FeedIndex(index, inf, factory.Storage().V1().CSINodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	added := make(chan metav1.Object, 1)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			added <- o
		}
	}}); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), append(indexSynced, inf.HasSynced)...) {
		t.Fatal("Node informer did not sync")
	}
	if got := index.Segments([]string{"zone"}); len(got) != 1 || got[0]["zone"] != "z1" {
		t.Errorf("segments of the index fed by the metadata informer = %v, want zone=z1", got)
	}
	lister := nodeLister{inf.GetIndexer()}
	got, err := lister.Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "z1"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lister (-want +got):\n%s", diff)
	}
	ev := <-added
	if ev.GetName() != "n1" || !cmp.Equal(ev.GetLabels(), want.Labels) || ev.GetAnnotations() != nil {
		t.Errorf("handler got name %q, labels %v, annotations %v", ev.GetName(), ev.GetLabels(), ev.GetAnnotations())
	}
	list, err := lister.List(labels.SelectorFromSet(labels.Set{"zone": "z1"}))
	if err != nil || len(list) != 1 || !cmp.Equal(list[0], want) {
		t.Errorf("List(zone=z1) = %v, %v", list, err)
	}
	if list, _ := lister.List(labels.SelectorFromSet(labels.Set{"zone": "z2"})); len(list) != 0 {
		t.Errorf("List(zone=z2) = %v, want none", list)
	}
	if _, err := lister.Get("n2"); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing node: %v, want NotFound", err)
	}
	if _, own := NewNodeInformer(nil, factory, 0, nil); own {
		t.Error("without a metadata client the Node informer is the factory's")
	}
}

// TestNodeListerTyped: nodeLister serves the typed informer's cache
// (*v1.Node) as it is.
func TestNodeListerTyped(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "z1"}}}
	if err := indexer.Add(n); err != nil {
		t.Fatal(err)
	}
	if got, err := (nodeLister{indexer}).Get("n1"); err != nil || got != n {
		t.Errorf("Get = %v, %v; want the cached object", got, err)
	}
	if got, err := (nodeLister{indexer}).List(labels.Everything()); err != nil || len(got) != 1 || got[0] != n {
		t.Errorf("List = %v, %v; want the cached object", got, err)
	}
}
