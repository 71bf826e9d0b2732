package capacity

import (
	"sort"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// capObj is a CSIStorageCapacity in "csi" (unless ns is set) for a zone and
// a class, as another sidecar or an earlier release left it.
type capObj struct {
	name, ns, driver, managedBy, zone, class string
	age                                      time.Duration
	owners                                   []metav1.OwnerReference
}

func (c capObj) object() *storagev1.CSIStorageCapacity {
	ns, driver := c.ns, c.driver
	if ns == "" {
		ns = "csi"
	}
	if driver == "" {
		driver = testDriver
	}
	return &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.name, Namespace: ns, UID: types.UID("uid-" + c.name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-c.age)),
			Labels:            map[string]string{labelDriverName: driver, labelManagedBy: c.managedBy},
			OwnerReferences:   c.owners,
		},
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{zoneKey: c.zone}},
		StorageClassName: c.class,
		Capacity:         resource.NewQuantity(1, resource.BinarySI),
	}
}

// capState is what the test compares of an object after a sync.
type capState struct {
	Namespace, ManagedBy, Zone, Class string
	Capacity                          int64
	Owners                            []string
}

func capStates(objs []storagev1.CSIStorageCapacity) map[string]capState {
	out := map[string]capState{}
	for _, o := range objs {
		var owners []string
		for _, r := range o.OwnerReferences {
			owners = append(owners, r.Kind+"/"+string(r.UID))
		}
		sort.Strings(owners)
		out[o.Name] = capState{o.Namespace, o.Labels[labelManagedBy], o.NodeTopology.MatchLabels[zoneKey],
			o.StorageClassName, o.Capacity.Value(), owners}
	}
	return out
}

// The publisher adopts the capacity objects of external-provisioner (same
// managed-by value) and those of an earlier release of its own (previous
// value): it updates the one of each (segment, class) in place, relabels
// it and makes its owner the only controller, and deletes the obsolete ones
// and the duplicates, so that after a swap in either direction or an upgrade
// there is exactly one object per (segment, class). Other drivers', other
// instances' and other namespaces' objects stay as they are.
func TestCapacityAdoptsUpstreamAndLegacyObjects(t *testing.T) {
	yes := true
	oldRS := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "csi-controller-1", UID: "uid-old-rs", Controller: &yes}
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "csi-controller", UID: "uid-dep", Controller: &yes}
	node := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-node"}
	ownName := func(zone, class string) string {
		return capacityName(testDriver, topology.Segment{zoneKey: zone}.String(), class)
	}
	const up, legacy = "external-provisioner", "csi-topology-provisioner"
	foreign := []capObj{
		{name: "csisc-otherdrv", driver: "other.example.com", managedBy: up, zone: "z1", class: "wffc"},
		{name: "csisc-nodeinst", managedBy: "external-provisioner-n9", zone: "z1", class: "wffc"},
		{name: "csisc-otherns", ns: "elsewhere", managedBy: up, zone: "z1", class: "wffc"},
	}
	foreignState := map[string]capState{
		"csisc-otherdrv": {"csi", up, "z1", "wffc", 1, nil},
		"csisc-nodeinst": {"csi", "external-provisioner-n9", "z1", "wffc", 1, nil},
		"csisc-otherns":  {"elsewhere", up, "z1", "wffc", 1, nil},
	}
	tests := []struct {
		name  string
		owner *metav1.OwnerReference
		pre   []capObj
		want  map[string]capState
	}{{
		name:  "external-provisioner's objects: updated in place, duplicate and obsolete ones deleted",
		owner: owner,
		pre: []capObj{
			{name: "csisc-upz1", managedBy: up, zone: "z1", class: "wffc", age: time.Hour, owners: []metav1.OwnerReference{oldRS, node}},
			{name: "csisc-upz1dup", managedBy: up, zone: "z1", class: "wffc", owners: []metav1.OwnerReference{oldRS}},
			{name: "csisc-upgone", managedBy: up, zone: "z3", class: "wffc", owners: []metav1.OwnerReference{oldRS}},
			{name: "csisc-upimm", managedBy: up, zone: "z2", class: "imm", owners: []metav1.OwnerReference{oldRS}},
		},
		want: map[string]capState{
			"csisc-upz1":          {"csi", up, "z1", "wffc", 10 * gi, []string{"Deployment/uid-dep", "Node/uid-node"}},
			ownName("z2", "wffc"): {"csi", up, "z2", "wffc", 10 * gi, []string{"Deployment/uid-dep"}},
		},
	}, {
		name:  "objects of an earlier release: relabelled in place, obsolete ones deleted",
		owner: owner,
		pre: []capObj{
			{name: ownName("z1", "wffc"), managedBy: legacy, zone: "z1", class: "wffc", owners: []metav1.OwnerReference{*owner}},
			{name: ownName("z2", "gone"), managedBy: legacy, zone: "z2", class: "gone", owners: []metav1.OwnerReference{*owner}},
		},
		want: map[string]capState{
			ownName("z1", "wffc"): {"csi", up, "z1", "wffc", 10 * gi, []string{"Deployment/uid-dep"}},
			ownName("z2", "wffc"): {"csi", up, "z2", "wffc", 10 * gi, []string{"Deployment/uid-dep"}},
		},
	}, {
		name: "both at once, no owner of its own: the current label wins, owners are left alone",
		pre: []capObj{
			{name: ownName("z1", "wffc"), managedBy: legacy, zone: "z1", class: "wffc", age: time.Hour},
			{name: "csisc-upz1", managedBy: up, zone: "z1", class: "wffc", owners: []metav1.OwnerReference{oldRS}},
		},
		want: map[string]capState{
			"csisc-upz1":          {"csi", up, "z1", "wffc", 10 * gi, []string{"ReplicaSet/uid-old-rs"}},
			ownName("z2", "wffc"): {"csi", up, "z2", "wffc", 10 * gi, nil},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := map[string]capState{}
			for k, v := range tt.want {
				want[k] = v
			}
			for k, v := range foreignState {
				want[k] = v
			}
			checkAdoption(t, tt.owner, append(append([]capObj{}, tt.pre...), foreign...), want)
		})
	}
}

// checkAdoption runs a full sync of a publisher with owner over the zones
// z1 and z2, the delayed class wffc and the immediate class imm, and the
// objects pre, and compares all capacity objects after it with want.
func checkAdoption(t *testing.T, owner *metav1.OwnerReference, pre []capObj, want map[string]capState) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	objs := []runtime.Object{makeClass("wffc").StorageClass, makeClass("imm").Immediate().StorageClass,
		makeNode("n1", "z1"), makeCSINode("n1", zoneKey), makeNode("n2", "z2"), makeCSINode("n2", zoneKey)}
	for _, c := range pre {
		objs = append(objs, c.object())
	}
	pe := newPublisherEnv(t, Config{Owner: owner}, csiClient, objs...)
	ctx = pe.start(ctx, t)
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	list, err := pe.client.StorageV1().CSIStorageCapacities("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, capStates(list.Items)); diff != "" {
		t.Errorf("objects after a sync (-want +got):\n%s", diff)
	}
}

// A refresh of one segment updates the adopted object of each class there
// in place (no second object for it) and deletes nothing.
func TestCapacitySegmentRefreshUpdatesAdoptedObject(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	pre := []capObj{
		{name: "csisc-upz1", managedBy: "external-provisioner", zone: "z1", class: "wffc", age: time.Hour},
		{name: "csisc-upz1dup", managedBy: "external-provisioner", zone: "z1", class: "wffc"},
	}
	objs := []runtime.Object{makeClass("wffc").StorageClass, makeNode("n1", "z1"), makeCSINode("n1", zoneKey)}
	for _, c := range pre {
		objs = append(objs, c.object())
	}
	pe := newPublisherEnv(t, Config{}, csiClient, objs...)
	ctx = pe.start(ctx, t)
	versions, err := pe.p.Refresh(ctx, []*csi.Topology{{Segments: map[string]string{zoneKey: "z1"}}}, "wffc")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := versions["csi/csisc-upz1"]; !ok || len(versions) != 1 {
		t.Errorf("refreshed %v, want the older external-provisioner object csi/csisc-upz1", versions)
	}
	list, err := pe.client.StorageV1().CSIStorageCapacities("csi").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]capState{
		"csisc-upz1":    {"csi", "external-provisioner", "z1", "wffc", 10 * gi, nil},
		"csisc-upz1dup": {"csi", "external-provisioner", "z1", "wffc", 1, nil},
	}
	if diff := cmp.Diff(want, capStates(list.Items)); diff != "" {
		t.Errorf("objects after a segment refresh (-want +got):\n%s", diff)
	}
}
