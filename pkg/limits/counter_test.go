package limits

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// testDriver is the driver whose volumes the counter counts.
const testDriver = "mock.csi.example.com"

// stores builds indexed stores like informers with AddIndexers would.
func stores(t testing.TB) Stores {
	t.Helper()
	// Each indexer gets its own Indexers map: AddIndexers adds to it.
	nsIndex := func() cache.Indexers { return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc} }
	s := Stores{
		Pods:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIndex()),
		Claims:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, nsIndex()),
		Attachments: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		Volumes:     cache.NewStore(cache.MetaNamespaceKeyFunc),
		Classes:     cache.NewStore(cache.MetaNamespaceKeyFunc),
		Nodes:       cache.NewStore(cache.MetaNamespaceKeyFunc),
		CSINodes:    cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	if err := s.Pods.AddIndexers(cache.Indexers{PodsByNode: podsByNode}); err != nil {
		t.Fatal(err)
	}
	if err := s.Claims.AddIndexers(cache.Indexers{ClaimsBySelectedNode: claimsBySelectedNode}); err != nil {
		t.Fatal(err)
	}
	if err := s.Attachments.AddIndexers(cache.Indexers{AttachmentsByNode: attachmentsByNode}); err != nil {
		t.Fatal(err)
	}
	return s
}

func add(t testing.TB, s cache.Store, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
}

func pvOf(name, driver, handle string) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}}}
}

func claimOf(ns, name, class, volume, selectedNode string) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volume}}
	if selectedNode != "" {
		c.Annotations = map[string]string{annSelectedNode: selectedNode}
	}
	return c
}

func podOf(ns, name, node string, claims ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PodSpec{NodeName: node}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func classOf(name, provisioner string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
}

func TestCount(t *testing.T) {
	s := stores(t)
	add(t, s.Classes, classOf("ours", testDriver), classOf("theirs", "other.example.com"))
	add(t, s.Volumes, pvOf("pv-a", testDriver, "h-a"), pvOf("pv-b", testDriver, "h-b"), pvOf("pv-x", "other.example.com", "h-x"),
		pvOf("pv-c", testDriver, "h-c"))
	add(t, s.Claims,
		claimOf("ns", "a", "ours", "pv-a", ""),
		claimOf("ns", "b", "ours", "pv-b", ""),
		claimOf("ns", "x", "theirs", "pv-x", ""),
		claimOf("ns", "pending-used", "ours", "", "n1"),     // used by a pod on n1 and selected for n1: once
		claimOf("ns", "pending-selected", "ours", "", "n1"), // only selected for n1
		claimOf("ns", "pending-theirs", "theirs", "", "n1"), // another driver
		claimOf("ns", "pending-n2", "ours", "", "n2"),
	)
	add(t, s.Pods,
		podOf("ns", "p1", "n1", "a", "x", "pending-used"),
		podOf("ns", "p2", "n1", "a"), // same volume again
		podOf("ns", "p3", "n2", "b"),
		func() *v1.Pod { p := podOf("ns", "done", "n1", "b"); p.Status.Phase = v1.PodSucceeded; return p }(),
	)
	add(t, s.Attachments,
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-a"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-a")}}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-c"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-c")}}},
	)
	c := NewCounter(testDriver, s)
	u, err := c.Count("n1")
	if err != nil {
		t.Fatal(err)
	}
	// Attached: h-a (two pods and an attachment), h-c (attachment only);
	// pending: pending-used, pending-selected.
	if u != (Usage{Attached: 2, Pending: 2}) || u.Total() != 4 {
		t.Errorf("n1 usage = %+v, want 2 attached + 2 pending", u)
	}
	if u, _ := c.Count("n2"); u != (Usage{Attached: 1, Pending: 1}) {
		t.Errorf("n2 usage = %+v, want 1 + 1", u)
	}
}

// Volumes names what Count counts: the same world as TestCount.
func TestVolumes(t *testing.T) {
	s := stores(t)
	add(t, s.Classes, classOf("ours", testDriver), classOf("theirs", "other.example.com"))
	add(t, s.Volumes, pvOf("pv-a", testDriver, "h-a"), pvOf("pv-c", testDriver, "h-c"), pvOf("pv-x", "other.example.com", "h-x"))
	add(t, s.Claims,
		claimOf("ns", "a", "ours", "pv-a", ""),
		claimOf("ns", "x", "theirs", "pv-x", ""),
		claimOf("ns", "pending-used", "ours", "", ""),       // used by a pod on n1
		claimOf("ns", "pending-selected", "ours", "", "n1"), // selected for n1
		claimOf("ns", "pending-theirs", "theirs", "", "n1"), // another driver
	)
	add(t, s.Pods, podOf("ns", "p1", "n1", "a", "x", "pending-used"))
	add(t, s.Attachments, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-c"}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: testDriver, NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-c")}}})
	c := NewCounter(testDriver, s)
	tests := []struct {
		name        string
		node        string
		wantHandles map[string]bool
		wantPending map[string]bool
	}{
		{name: "used, attached and pending", node: "n1", wantHandles: map[string]bool{"h-a": true, "h-c": true},
			wantPending: map[string]bool{"ns/pending-used": true, "ns/pending-selected": true}},
		{name: "empty node", node: "n2", wantHandles: map[string]bool{}, wantPending: map[string]bool{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			handles, pending, err := c.Volumes(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantHandles, handles); diff != "" {
				t.Errorf("handles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPending, pending); diff != "" {
				t.Errorf("pending (-want +got):\n%s", diff)
			}
			u, err := c.Count(tc.node)
			if err != nil || u != (Usage{Attached: len(handles), Pending: len(pending)}) {
				t.Errorf("Count = %+v, %v; want the sizes of Volumes", u, err)
			}
		})
	}
}

func TestLimit(t *testing.T) {
	s := stores(t)
	add(t, s.CSINodes,
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "counted"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: testDriver, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](3)}}}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "skew"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: testDriver}}}},
	)
	add(t, s.Nodes,
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "counted"}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "skew"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceName("attachable-volumes-csi-" + testDriver): resource.MustParse("5")}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unlimited"}},
	)
	c := NewCounter(testDriver, s)
	for node, want := range map[string]*int64{"counted": ptr.To[int64](3), "skew": ptr.To[int64](5), "unlimited": nil} {
		got, err := c.Limit(node)
		if err != nil || (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Errorf("Limit(%s) = %v, %v; want %v", node, got, err, want)
		}
	}
	if _, err := c.Limit("gone"); err == nil {
		t.Error("Limit of a missing node: no error")
	}
	fits, _, _, err := c.Fits("counted", 3)
	if err != nil || !fits {
		t.Errorf("3 volumes on an empty node with limit 3: fits=%v, %v", fits, err)
	}
	if fits, _, _, _ := c.Fits("counted", 4); fits {
		t.Error("4 volumes fit under a limit of 3")
	}
}

// BenchmarkCount measures one node's count in a cluster of 5 000 nodes,
// 50 000 pods, claims and PVs (10 per node).
func BenchmarkCount(b *testing.B) {
	s := stores(b)
	add(b, s.Classes, classOf("ours", testDriver))
	for n := 0; n < 5000; n++ {
		node := fmt.Sprintf("node-%d", n)
		for i := 0; i < 10; i++ {
			id := fmt.Sprintf("%d-%d", n, i)
			add(b, s.Volumes, pvOf("pv-"+id, testDriver, "h-"+id))
			add(b, s.Claims, claimOf("ns", "c-"+id, "ours", "pv-"+id, ""))
			add(b, s.Pods, podOf("ns", "p-"+id, node, "c-"+id))
		}
	}
	c := NewCounter(testDriver, s)
	b.ReportAllocs()
	for b.Loop() {
		u, err := c.Count("node-2500")
		if err != nil || u.Attached != 10 {
			b.Fatalf("usage %+v, %v", u, err)
		}
	}
}

func TestAddIndexers(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	err := AddIndexers(factory.Core().V1().Pods().Informer(), factory.Core().V1().PersistentVolumeClaims().Informer(),
		factory.Storage().V1().VolumeAttachments().Informer())
	if err != nil {
		t.Fatal(err)
	}
	idx := factory.Core().V1().Pods().Informer().GetIndexer()
	if err := idx.Add(podOf("ns", "p", "n1")); err != nil {
		t.Fatal(err)
	}
	if got, _ := idx.ByIndex(PodsByNode, "n1"); len(got) != 1 {
		t.Errorf("pods on n1 by index: %d, want 1", len(got))
	}
}
