package scheduler

import (
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

const (
	driver  = "mock.csi.example.com"
	zoneKey = "topology.mock.csi.example.com/zone"
	gi      = int64(1) << 30
)

// world holds indexed stores standing in for informers.
type world struct {
	claims, volumes, classes, csiNodes, capacities, pods, attachments, nodes cache.Indexer
}

func newWorld(t testing.TB) *world {
	t.Helper()
	// Each indexer gets its own Indexers map: AddIndexers adds to it.
	ns := func() cache.Indexers { return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc} }
	w := &world{
		claims: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns()), volumes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		classes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), csiNodes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		capacities: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns()), pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ns()),
		attachments: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), nodes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
	}
	if err := w.capacities.AddIndexers(CapacityIndexers()); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) add(t testing.TB, s cache.Indexer, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *world) core(t testing.TB, now func() time.Time) *Core {
	t.Helper()
	return w.coreWith(t, Config{Driver: driver}, now)
}

func (w *world) coreWith(t testing.TB, cfg Config, now func() time.Time) *Core {
	t.Helper()
	return w.coreFrom(t, cfg, now, OptionalSources{})
}

// coreFrom builds a Core on the world's stores and opt's optional reads.
func (w *world) coreFrom(t testing.TB, cfg Config, now func() time.Time, opt OptionalSources) *Core {
	t.Helper()
	stores := limits.Stores{Pods: w.pods, Claims: w.claims, Attachments: w.attachments, Volumes: w.volumes,
		Classes: w.classes, Nodes: w.nodes, CSINodes: w.csiNodes}
	for name, idx := range map[string]cache.Indexer{limits.PodsByNode: w.pods, limits.ClaimsBySelectedNode: w.claims, limits.AttachmentsByNode: w.attachments} {
		if _, ok := idx.GetIndexers()[name]; !ok {
			t.Fatalf("missing index %s", name)
		}
	}
	c, err := New(cfg, Listers{
		Claims:     corelisters.NewPersistentVolumeClaimLister(w.claims),
		Volumes:    corelisters.NewPersistentVolumeLister(w.volumes),
		Classes:    storagelisters.NewStorageClassLister(w.classes),
		CSINodes:   storagelisters.NewCSINodeLister(w.csiNodes),
		Capacities: indexedCapacities{w.capacities},
		Snapshots:  opt.Snapshots,
		Liveness:   opt.Liveness,
		CSIDrivers: opt.CSIDrivers,
	}, limits.NewCounter(driver, stores), now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withCounterIndexes(t testing.TB, w *world) {
	t.Helper()
	for idx, f := range map[cache.Indexer]cache.IndexFunc{
		w.pods: func(obj any) ([]string, error) {
			if n := obj.(*v1.Pod).Spec.NodeName; n != "" {
				return []string{n}, nil
			}
			return nil, nil
		},
	} {
		if err := idx.AddIndexers(cache.Indexers{limits.PodsByNode: f}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.claims.AddIndexers(cache.Indexers{limits.ClaimsBySelectedNode: func(obj any) ([]string, error) {
		c := obj.(*v1.PersistentVolumeClaim)
		if n := c.Annotations[annSelectedNode]; n != "" && c.Spec.VolumeName == "" {
			return []string{n}, nil
		}
		return nil, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := w.attachments.AddIndexers(cache.Indexers{limits.AttachmentsByNode: func(obj any) ([]string, error) {
		return []string{obj.(*storagev1.VolumeAttachment).Spec.NodeName}, nil
	}}); err != nil {
		t.Fatal(err)
	}
}

func node(name, zone string) *v1.Node {
	labels := map[string]string{}
	if zone != "" {
		labels[zoneKey] = zone
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func csiNode(name string, count *int32, drv string) *storagev1.CSINode {
	d := storagev1.CSINodeDriver{Name: drv, NodeID: name, TopologyKeys: []string{zoneKey}}
	if count != nil {
		d.Allocatable = &storagev1.VolumeNodeResources{Count: count}
	}
	return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{d}}}
}

func class(name string, zones ...string) *storagev1.StorageClass {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver, VolumeBindingMode: &mode}
	if len(zones) > 0 {
		c.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: zones}}}}
	}
	return c
}

func claim(name, cls string, bytes int64) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, Resources: v1.VolumeResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)}}},
	}
}

func pod(name string, claims ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func capacity(cls, zone string, bytes int64) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{
		ObjectMeta:       metav1.ObjectMeta{Namespace: "csi", Name: cls + "-" + zone},
		StorageClassName: cls,
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{zoneKey: zone}},
		Capacity:         resource.NewQuantity(bytes, resource.BinarySI),
	}
}

func TestFilter(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"), class("z1only", "z1"))
	w.add(t, w.nodes, node("n1", "z1"), node("n2", "z2"), node("bare", "z1"), node("bare-z2", "z2"), node("nolabel", ""), node("limited", "z2"))
	w.add(t, w.csiNodes, csiNode("n1", nil, driver), csiNode("n2", nil, driver), csiNode("nolabel", nil, driver),
		csiNode("bare", nil, "other.example.com"), csiNode("bare-z2", nil, "other.example.com"), csiNode("limited", ptr.To[int32](1), driver))
	w.add(t, w.capacities, capacity("fast", "z1", 20*gi), capacity("fast", "z2", 100*gi))
	pending := claim("pending-on-limited", "fast", gi)
	pending.Annotations = map[string]string{annSelectedNode: "limited"}
	w.add(t, w.claims, claim("a", "fast", 8*gi), claim("b", "fast", 8*gi), claim("c", "fast", 8*gi), claim("z", "z1only", gi), pending,
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-z2"}})
	w.add(t, w.volumes, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-z2"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}},
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z2"}}}}}}}}})
	c := w.core(t, nil)

	tests := []struct {
		name         string
		pod          *v1.Pod
		node         *v1.Node
		want         Reason
		unresolvable bool
	}{
		{name: "no volumes of ours", pod: pod("plain"), node: node("bare", "z1")},
		{name: "fits", pod: pod("p", "a", "b"), node: node("n1", "z1")},
		{name: "driver not registered", pod: pod("p", "a"), node: node("bare", "z1"), want: ReasonDriverNotRegistered, unresolvable: true},
		{name: "topology label missing", pod: pod("p", "a"), node: node("nolabel", ""), want: ReasonTopologyLabelMissing, unresolvable: true},
		{name: "outside allowedTopologies", pod: pod("p", "z"), node: node("n2", "z2"), want: ReasonOutsideAllowedTopologies, unresolvable: true},
		{name: "sum of the pod's claims exceeds the segment", pod: pod("p", "a", "b", "c"), node: node("n1", "z1"), want: ReasonInsufficientCapacity, unresolvable: true},
		{name: "same pod fits the larger zone", pod: pod("p", "a", "b", "c"), node: node("n2", "z2")},
		{name: "attach limit with a pending claim", pod: pod("p", "a"), node: node("limited", "z2"), want: ReasonVolumeLimitExceeded},
		{name: "bound volume elsewhere", pod: pod("p", "bound"), node: node("n1", "z1"), want: ReasonVolumeNodeAffinityConflict, unresolvable: true},
		{name: "bound volume here", pod: pod("p", "bound"), node: node("n2", "z2")},
		{name: "bound volume only, driver not registered", pod: pod("p", "bound"), node: node("bare-z2", "z2"), want: ReasonDriverNotRegistered, unresolvable: true},
		{name: "bound volume only, no CSINode", pod: pod("p", "bound"), node: node("no-csinode", "z2"), want: ReasonDriverNotRegistered, unresolvable: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			podVols, err := c.PodVolumes(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			st := c.Filter(podVols, tc.node)
			switch {
			case tc.want == "" && st != nil:
				t.Errorf("Filter = %v, want fit", st)
			case tc.want != "" && (st == nil || st.Reason != tc.want || st.Unresolvable != tc.unresolvable):
				t.Errorf("Filter = %v, want %s (unresolvable %v)", st, tc.want, tc.unresolvable)
			}
		})
	}
	if _, err := c.PodVolumes(pod("p", "missing")); err == nil {
		t.Error("missing claim: no error")
	}
}

// Reservations of other pods count against a segment until released, and
// expire.
func TestReservationsAndScore(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	w.add(t, w.nodes, node("n1", "z1"), node("n2", "z2"))
	w.add(t, w.csiNodes, csiNode("n1", nil, driver), csiNode("n2", nil, driver))
	w.add(t, w.capacities, capacity("fast", "z1", 20*gi), capacity("fast", "z2", 40*gi))
	w.add(t, w.claims, claim("a", "fast", 16*gi), claim("b", "fast", 8*gi))
	now := time.Unix(1000, 0)
	c := w.core(t, func() time.Time { return now })
	a, _ := c.PodVolumes(pod("pa", "a"))
	b, _ := c.PodVolumes(pod("pb", "b"))
	// Each scheduling cycle computes the pod's volumes anew: what Filter
	// reads of the reservations in flight is fixed for one cycle.
	cycle := func(p *v1.Pod) *PodVolumes {
		t.Helper()
		podVols, err := c.PodVolumes(p)
		if err != nil {
			t.Fatal(err)
		}
		return podVols
	}
	if st := c.Filter(b, node("n1", "z1")); st != nil {
		t.Fatalf("b alone: %v", st)
	}
	if s1, s2 := c.Score(b, node("n1", "z1")), c.Score(b, node("n2", "z2")); s1 != 60 || s2 != 80 {
		t.Errorf("scores z1=%d z2=%d, want 60 and 80", s1, s2)
	}
	c.Reserve(a, node("n1", "z1"))
	c.Reserve(a, node("n1", "z1")) // idempotent
	if st := c.Filter(cycle(pod("pb", "b")), node("n1", "z1")); st == nil || st.Reason != ReasonInsufficientCapacity {
		t.Errorf("b after a's reservation: %v, want InsufficientCapacity", st)
	}
	if st := c.Filter(cycle(pod("pa", "a")), node("n1", "z1")); st != nil {
		t.Errorf("a's own reservation counts against it: %v", st)
	}
	c.Unreserve(a)
	if st := c.Filter(cycle(pod("pb", "b")), node("n1", "z1")); st != nil {
		t.Errorf("b after a's unreserve: %v", st)
	}
	c.Reserve(a, node("n1", "z1"))
	now = now.Add(6 * time.Minute)
	if st := c.Filter(cycle(pod("pb", "b")), node("n1", "z1")); st != nil || c.Ledger().Len() != 0 {
		t.Errorf("b after a's reservation expired: %v, %d reservations", st, c.Ledger().Len())
	}
	c.Reserve(a, node("n1", "z1"))
	bound := claim("a", "fast", 16*gi)
	bound.Spec.VolumeName = "pv-a"
	c.ObserveClaim(bound, nil)
	z1 := topologySegment("z1")
	if got := c.Ledger().Reserved(z1, "fast", nil); got != 16*gi {
		t.Errorf("bound claim whose PV is not seen yet reserves %d, want %d", got, 16*gi)
	}
	// The PV records the capacity version that counts it; until the
	// capacity informer has it, the reservation stays.
	cap1 := capacity("fast", "z1", 20*gi)
	cap1.ResourceVersion = "41"
	w.add(t, w.capacities, cap1)
	w.add(t, w.volumes, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a",
		Annotations: map[string]string{topology.AnnCapacityVersions: "csi/fast-z1=42"}}})
	if got := c.Ledger().Reserved(z1, "fast", nil); got != 16*gi {
		t.Errorf("bound claim whose capacity is not refreshed yet reserves %d, want %d", got, 16*gi)
	}
	cap1 = capacity("fast", "z1", 4*gi)
	cap1.ResourceVersion = "42"
	if err := w.capacities.Update(cap1); err != nil {
		t.Fatal(err)
	}
	if got := c.Ledger().Reserved(z1, "fast", nil); got != 0 {
		t.Errorf("bound claim reserves %d once the capacity counts it, want 0", got)
	}
	// A bound claim whose PV has no annotation (capacity publishing off)
	// releases at once.
	c.Reserve(a, node("n1", "z1"))
	w.add(t, w.volumes, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-plain"}})
	bound.Spec.VolumeName = "pv-plain"
	c.ObserveClaim(bound, nil)
	if c.Ledger().Len() != 0 {
		t.Errorf("%d reservations after a bind to a PV without capacity versions", c.Ledger().Len())
	}
	selected := claim("b", "fast", 8*gi)
	selected.Annotations = map[string]string{annSelectedNode: "n2"}
	c.ObserveClaim(selected, node("n2", "z2"))
	if got := c.Ledger().Reserved(topologySegment("z2"), "fast", nil); got != 8*gi {
		t.Errorf("observed selected claim reserves %d, want %d", got, 8*gi)
	}
	c.Reserve(b, node("n2", "z2"))
	c.Ledger().ReleasePod("ns/pb", nil)
	if c.Ledger().Len() != 0 {
		t.Errorf("%d reservations left after bind and pod release", c.Ledger().Len())
	}
}

func topologySegment(zone string) string { return zoneKey + "=" + zone }

func TestIgnoreCapacity(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	w.add(t, w.nodes, node("n1", "z1"))
	w.add(t, w.csiNodes, csiNode("n1", nil, driver))
	w.add(t, w.capacities, capacity("fast", "z1", gi))
	w.add(t, w.claims, claim("a", "fast", 16*gi))
	c := w.core(t, nil)
	a, _ := c.PodVolumes(pod("pa", "a"))
	if st := c.Filter(a, node("n1", "z1")); st == nil || st.Reason != ReasonInsufficientCapacity {
		t.Fatalf("16 GiB in a 1 GiB segment: %v, want InsufficientCapacity", st)
	}
	c = w.coreWith(t, Config{Driver: driver, IgnoreCapacity: true}, nil)
	a, _ = c.PodVolumes(pod("pa", "a"))
	if st := c.Filter(a, node("n1", "z1")); st != nil {
		t.Errorf("with capacity ignored: %v", st)
	}
	if s := c.Score(a, node("n1", "z1")); s != 0 {
		t.Errorf("score with capacity ignored = %d, want 0", s)
	}
}

// A claim event whose selected node is not known (yet) keeps a reservation
// on that node and ends one on another node.
func TestObserveClaimUnknownNode(t *testing.T) {
	tests := []struct {
		name     string
		reserved string // node the claim is reserved on first
		want     int
	}{
		{name: "reserved on the selected node", reserved: "n1", want: 1},
		{name: "reserved on another node", reserved: "n2", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			withCounterIndexes(t, w)
			w.add(t, w.classes, class("fast"))
			w.add(t, w.csiNodes, csiNode("n1", nil, driver), csiNode("n2", nil, driver))
			c := w.core(t, nil)
			sel := claim("s", "fast", gi)
			sel.Annotations = map[string]string{annSelectedNode: "n1"}
			zone := map[string]string{"n1": "z1", "n2": "z2"}[tc.reserved]
			c.ObserveClaim(sel, node(tc.reserved, zone))
			c.ObserveClaim(sel, nil)
			if got := c.Ledger().Len(); got != tc.want {
				t.Errorf("%d reservations, want %d", got, tc.want)
			}
		})
	}
}

// TestCoreCompleteAtNew: New's Config and Listers are all a Core reads; no
// method sets, ignores or tracks anything afterwards, so a Core is never
// seen half configured by the informer handlers that already call it.
func TestCoreCompleteAtNew(t *testing.T) {
	core := reflect.TypeOf(&Core{})
	for i := range core.NumMethod() {
		name := core.Method(i).Name
		for _, prefix := range []string{"Set", "Ignore", "Track"} {
			if strings.HasPrefix(name, prefix) {
				t.Errorf("Core.%s configures a Core after New: move it into Config or Listers", name)
			}
		}
	}
}
