package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const rackKey = "topology.mock.csi.example.com/rack"

// capacityObject builds a CSIStorageCapacity of class "fast" in namespace
// ns with a selector sel.
func capacityObject(ns, name string, bytes int64, sel *metav1.LabelSelector) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StorageClassName: "fast",
		NodeTopology: sel, Capacity: resource.NewQuantity(bytes, resource.BinarySI)}
}

func matchLabels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func TestCapacityLookup(t *testing.T) {
	zoneRack := map[string]string{zoneKey: "z1", rackKey: "r1", "other": "x"}
	inZone := func(zones ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: zoneKey, Operator: metav1.LabelSelectorOpIn, Values: zones}}}
	}
	tests := []struct {
		name   string
		objs   []*storagev1.CSIStorageCapacity
		labels map[string]string
		want   Capacity
		known  bool
	}{
		{name: "none", labels: zoneRack},
		{name: "exact segment", labels: zoneRack, known: true, want: Capacity{Object: "csi/a", Free: 5},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "a", 5, matchLabels(zoneKey, "z1", rackKey, "r1")),
				capacityObject("csi", "b", 50, matchLabels(zoneKey, "z1", rackKey, "r2"))}},
		{name: "coarser matchLabels key set", labels: zoneRack, known: true, want: Capacity{Object: "csi/zone", Free: 7},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "zone", 7, matchLabels(zoneKey, "z1")),
				capacityObject("csi", "z2", 70, matchLabels(zoneKey, "z2"))}},
		{name: "matchLabels with a label that is not a topology key", labels: zoneRack, known: true, want: Capacity{Object: "csi/x", Free: 3},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "x", 3, matchLabels(zoneKey, "z1", "other", "x"))}},
		{name: "empty selector matches every node", labels: zoneRack, known: true, want: Capacity{Object: "csi/all", Free: 1},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "all", 1, &metav1.LabelSelector{})}},
		{name: "nil nodeTopology matches no node", labels: zoneRack,
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "nil", 1, nil)}},
		{name: "matchExpressions fallback", labels: zoneRack, known: true, want: Capacity{Object: "csi/expr", Free: 9},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "expr", 9, inZone("z1", "z2")),
				capacityObject("csi", "expr-miss", 90, inZone("z3"))}},
		{name: "largest of several matches", labels: zoneRack, known: true, want: Capacity{Object: "csi/expr", Free: 9},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "seg", 5, matchLabels(zoneKey, "z1", rackKey, "r1")),
				capacityObject("csi", "expr", 9, inZone("z1")), capacityObject("csi", "zone", 7, matchLabels(zoneKey, "z1"))}},
		{name: "ties by namespace then name", labels: zoneRack, known: true, want: Capacity{Object: "a/z", Free: 5},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("b", "a", 5, matchLabels(zoneKey, "z1", rackKey, "r1")),
				capacityObject("a", "z", 5, matchLabels(zoneKey, "z1")), capacityObject("a", "zz", 5, inZone("z1"))}},
		{name: "maximum volume size of the chosen object", labels: zoneRack, known: true, want: Capacity{Object: "csi/m", Free: 8, MaxVolume: ptr.To[int64](2)},
			objs: []*storagev1.CSIStorageCapacity{func() *storagev1.CSIStorageCapacity {
				c := capacityObject("csi", "m", 8, matchLabels(zoneKey, "z1"))
				c.MaximumVolumeSize = resource.NewQuantity(2, resource.BinarySI)
				return c
			}()}},
		{name: "node without the keys", labels: map[string]string{"other": "x"},
			objs: []*storagev1.CSIStorageCapacity{capacityObject("csi", "zone", 7, matchLabels(zoneKey, "z1"))}},
		{name: "another class", labels: zoneRack,
			objs: []*storagev1.CSIStorageCapacity{func() *storagev1.CSIStorageCapacity {
				c := capacityObject("csi", "slow", 8, matchLabels(zoneKey, "z1"))
				c.StorageClassName = "slow"
				return c
			}()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, CapacityIndexers())
			for _, o := range tc.objs {
				if err := idx.Add(o); err != nil {
					t.Fatal(err)
				}
			}
			got, known := indexedCapacities{idx}.Capacity("fast", tc.labels)
			if known != tc.known {
				t.Errorf("known = %v, want %v", known, tc.known)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Capacity (-want +got):\n%s", diff)
			}
		})
	}
}

// The choice does not depend on the order objects arrive in, and an
// object's update or deletion moves it between the indexes.
func TestCapacityLookupOrderAndUpdates(t *testing.T) {
	objs := []*storagev1.CSIStorageCapacity{
		capacityObject("csi", "a", 5, matchLabels(zoneKey, "z1")),
		capacityObject("csi", "b", 5, matchLabels(zoneKey, "z1")),
		capacityObject("csi", "c", 5, matchLabels(zoneKey, "z1")),
	}
	labels := map[string]string{zoneKey: "z1"}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, CapacityIndexers())
		for _, i := range order {
			if err := idx.Add(objs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := (indexedCapacities{idx}).Capacity("fast", labels); got.Object != "csi/a" {
			t.Errorf("order %v: chose %s, want csi/a", order, got.Object)
		}
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, CapacityIndexers())
	src := indexedCapacities{idx}
	if err := idx.Add(objs[0]); err != nil {
		t.Fatal(err)
	}
	moved := objs[0].DeepCopy()
	moved.NodeTopology = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: zoneKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"z1"}}}}
	if err := idx.Update(moved); err != nil {
		t.Fatal(err)
	}
	if got, known := src.Capacity("fast", labels); known {
		t.Errorf("after the selector excluded z1: %+v", got)
	}
	if err := idx.Delete(moved); err != nil {
		t.Fatal(err)
	}
	if vals := idx.ListIndexFuncValues(CapacityKeySets); len(vals) != 0 {
		t.Errorf("key sets left after deletion: %q", vals)
	}
}
