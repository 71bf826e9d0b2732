package informercache

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
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

// sameString says whether a and b share their bytes (one string, not two
// equal copies).
func sameString(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }

// TestTrimInternsLabels: two nodes decoded apart (each with its own copy of
// every string) share their label keys and values once trimmed; a value
// equal to the node's name shares the name's string.
func TestTrimInternsLabels(t *testing.T) {
	decoded := func(name string) *v1.Node {
		// strings.Clone: as a decoder gives them, separate copies.
		c := strings.Clone
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c(name), Labels: map[string]string{
			c("topology.example.com/zone"): c("z1"), c("kubernetes.io/hostname"): c(name),
		}}}
	}
	for name, trim := range map[string]func(*v1.Node) *v1.Node{
		"typed": func(n *v1.Node) *v1.Node {
			out, err := TrimForCache(n)
			if err != nil {
				t.Fatal(err)
			}
			return out.(*v1.Node)
		},
		"metadata": func(n *v1.Node) *v1.Node {
			out, err := nodeFromMetadata(&metav1.PartialObjectMetadata{ObjectMeta: n.ObjectMeta})
			if err != nil {
				t.Fatal(err)
			}
			return asNode(out)
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := trim(decoded("n1")), trim(decoded("n2"))
			if diff := cmp.Diff(decoded("n1").Labels, a.Labels); diff != "" {
				t.Fatalf("labels changed (-want +got):\n%s", diff)
			}
			keyOf := func(n *v1.Node, want string) string {
				for k := range n.Labels {
					if k == want {
						return k
					}
				}
				t.Fatalf("node %s has no label %s", n.Name, want)
				return ""
			}
			for _, k := range []string{"topology.example.com/zone", "kubernetes.io/hostname"} {
				if !sameString(keyOf(a, k), keyOf(b, k)) {
					t.Errorf("label key %q is not shared between nodes", k)
				}
			}
			if zone := "topology.example.com/zone"; !sameString(a.Labels[zone], b.Labels[zone]) {
				t.Errorf("label value %q is not shared between nodes", a.Labels[zone])
			}
			if host := a.Labels["kubernetes.io/hostname"]; !sameString(host, a.Name) {
				t.Errorf("hostname label %q does not share the node's name", host)
			}
		})
	}
}

// TestTrimForDriverCSINode: a CSINode keeps its identity and the driver's
// entry (topology keys interned); other drivers' entries, owner references,
// labels and managedFields go; everything else still goes through
// TrimForCache.
func TestTrimForDriverCSINode(t *testing.T) {
	trim := TrimForDriver(testDriver)
	now := metav1.Now()
	count := int32(4)
	decoded := func(name string, drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
		return &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u-" + types.UID(name), ResourceVersion: "9", CreationTimestamp: now,
				Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: "n"}}},
			Spec: storagev1.CSINodeSpec{Drivers: drivers},
		}
	}
	entry := func(driver, node string) storagev1.CSINodeDriver {
		return storagev1.CSINodeDriver{Name: strings.Clone(driver), NodeID: node,
			TopologyKeys: []string{strings.Clone(zoneKey)}, Allocatable: &storagev1.VolumeNodeResources{Count: &count}}
	}
	got, err := trim(decoded("n1", entry("other.example.com", "o1"), entry(testDriver, "id1")))
	if err != nil {
		t.Fatal(err)
	}
	want := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u-n1", ResourceVersion: "9", CreationTimestamp: now},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "id1",
			TopologyKeys: []string{zoneKey}, Allocatable: &storagev1.VolumeNodeResources{Count: &count}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("trimmed CSINode (-want +got):\n%s", diff)
	}
	if again, _ := trim(got); !cmp.Equal(got, again) {
		t.Errorf("not idempotent: %v", cmp.Diff(got, again))
	}
	other, _ := trim(decoded("n2", entry(testDriver, "id2")))
	if a, b := got.(*storagev1.CSINode).Spec.Drivers[0].TopologyKeys[0], other.(*storagev1.CSINode).Spec.Drivers[0].TopologyKeys[0]; !sameString(a, b) {
		t.Error("topology keys are not shared between CSINodes")
	}
	if keys, err := topology.DriverKeys(got.(*storagev1.CSINode), testDriver); err != nil || !cmp.Equal(keys, []string{zoneKey}) {
		t.Errorf("DriverKeys of the trimmed CSINode = %v, %v", keys, err)
	}
	none, _ := trim(decoded("n3", entry("other.example.com", "o3")))
	if _, err := topology.DriverKeys(none.(*storagev1.CSINode), testDriver); err == nil {
		t.Error("a CSINode without the driver's entry reads as registered once trimmed")
	}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	if out, _ := trim(claim); out.(*v1.PersistentVolumeClaim).ManagedFields != nil {
		t.Error("TrimForDriver does not trim other objects as TrimForCache does")
	}
}
