package extender

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

const (
	driver  = "mock.csi.example.com"
	zoneKey = "topology.kubernetes.io/zone"
)

func indexer(t *testing.T, objs ...runtime.Object) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// The extender, on the real core, rejects the nodes from which a
// clone's source volume is out of reach, as unresolvable, and says why.
func TestFilterCloneSource(t *testing.T) {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	cls := "fast"
	clone := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-clone"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls,
			DataSourceRef: &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"},
			Resources:     v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}
	src := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "src", UID: "u-src"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, VolumeName: "pv-src"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-src"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}},
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}}}}}}}}}
	var csiNodes, nodes []runtime.Object
	for name, zone := range map[string]string{"a1": "z1", "b1": "z2", "b2": "z2"} {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{zoneKey: zone}}})
		csiNodes = append(csiNodes, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{
			Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: name, TopologyKeys: []string{zoneKey}}}}})
	}
	core, err := scheduler.New(scheduler.Config{Driver: driver}, scheduler.Listers{
		Claims:   corelisters.NewPersistentVolumeClaimLister(indexer(t, clone, src)),
		Volumes:  corelisters.NewPersistentVolumeLister(indexer(t, pv)),
		Classes:  storagelisters.NewStorageClassLister(indexer(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cls}, Provisioner: driver, VolumeBindingMode: &mode})),
		CSINodes: storagelisters.NewCSINodeLister(indexer(t, csiNodes...)),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serverWithNodes(t, core, corelisters.NewNodeLister(indexer(t, nodes...)))
	body := argsFor(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "p"}}}}}}, "a1", "b1", "b2")
	var res extenderv1.ExtenderFilterResult
	if code := post(t, srv.URL+"/filter", body, &res); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if diff := cmp.Diff([]string{"a1"}, *res.NodeNames); diff != "" {
		t.Errorf("fitting nodes (-want +got):\n%s", diff)
	}
	want := "DataSourceUnreachable: claim ns/p clones ns/src, whose volume is reachable only from " + zoneKey + " in (z1) (a clone is made where its source volume is reachable)"
	for _, n := range []string{"b1", "b2"} {
		if got := res.FailedAndUnresolvableNodes[n]; got != want {
			t.Errorf("node %s: %q, want %q", n, got, want)
		}
	}
	if len(res.FailedNodes) != 0 || strings.TrimSpace(res.Error) != "" {
		t.Errorf("failed %v, error %q; want none", res.FailedNodes, res.Error)
	}
}
