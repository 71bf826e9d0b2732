package plugin

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

const zoneKey = "topology.kubernetes.io/zone"

// The plugin rejects a node out of reach of a clone's source as
// UnschedulableAndUnresolvable (preemption cannot move a volume), with the
// core's reason.
func TestFilterCloneSource(t *testing.T) {
	store := func(objs ...runtime.Object) cache.Indexer {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := idx.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return idx
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	src := claimOf("src", "1Gi", nil)
	src.Spec.VolumeName = "pv-src"
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-src"}, Spec: v1.PersistentVolumeSpec{
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}}}}}}}}}
	var csiNodes []runtime.Object
	for _, n := range []string{"a1", "b1"} {
		csiNodes = append(csiNodes, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: storagev1.CSINodeSpec{
			Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: n, TopologyKeys: []string{zoneKey}}}}})
	}
	core, err := scheduler.New(scheduler.Config{Driver: driver}, scheduler.Listers{
		Claims:   corelisters.NewPersistentVolumeClaimLister(store(src, claimOf("clone", "1Gi", &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}))),
		Volumes:  corelisters.NewPersistentVolumeLister(store(pv)),
		Classes:  storagelisters.NewStorageClassLister(store(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: driver, VolumeBindingMode: &mode})),
		CSINodes: storagelisters.NewCSINodeLister(store(csiNodes...)),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{core: core}
	_, ctx := ktesting.NewTestContext(t)
	pod := podUsing("ns", "app", "clone")
	cs := &cycleState{data: map[fwk.StateKey]fwk.StateData{}}
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter %v", st)
	}
	zone := func(name, z string) nodeInfo {
		return nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{zoneKey: z}}}}
	}
	if st := p.Filter(ctx, cs, pod, zone("a1", "z1")); !st.IsSuccess() {
		t.Errorf("node in the source's zone: %v", st)
	}
	st := p.Filter(ctx, cs, pod, zone("b1", "z2"))
	want := "DataSourceUnreachable: claim ns/clone clones ns/src, whose volume is reachable only from " + zoneKey + " in (z1) (a clone is made where its source volume is reachable)"
	if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != want {
		t.Errorf("node in another zone: %v %q, want UnschedulableAndUnresolvable %q", st.Code(), st.Message(), want)
	}
}
