package scheduler

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestNodeSegmentFollowsObjects: a node's cached segment is used while its
// Node and CSINode are the same objects, and recomputed as soon as either
// is replaced (an informer update).
func TestNodeSegmentFollowsObjects(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	n1 := node("n1", "z1")
	w.add(t, w.nodes, n1)
	w.add(t, w.csiNodes, csiNode("n1", nil, driver))
	w.add(t, w.capacities, capacity("fast", "z1", 10*gi), capacity("fast", "z2", gi))
	w.add(t, w.claims, claim("a", "fast", 4*gi))
	c := w.core(t, nil)
	filter := func(n *v1.Node) *Status {
		t.Helper()
		podVols, err := c.PodVolumes(pod("p", "a"))
		if err != nil {
			t.Fatal(err)
		}
		return c.Filter(podVols, n)
	}

	if st := filter(n1); st != nil {
		t.Fatalf("z1 with 10 Gi free: %v", st)
	}
	if a, b := c.nodeSegment(n1), c.nodeSegment(n1); a != b || a.seg != topologySegment("z1") {
		t.Fatalf("same objects: entries %p and %p, segment %q", a, b, a.seg)
	}

	// The node moves to z2 (1 Gi free): a new Node object.
	moved := node("n1", "z2")
	if err := w.nodes.Update(moved); err != nil {
		t.Fatal(err)
	}
	if st := filter(moved); st == nil || st.Reason != ReasonInsufficientCapacity || !strings.Contains(st.Message, topologySegment("z2")) {
		t.Errorf("node moved to z2: %v, want InsufficientCapacity in %s", st, topologySegment("z2"))
	}

	// The driver is unregistered: a new CSINode object, same Node.
	if err := w.csiNodes.Update(csiNode("n1", nil, "other.example.com")); err != nil {
		t.Fatal(err)
	}
	if st := filter(moved); st == nil || st.Reason != ReasonDriverNotRegistered {
		t.Errorf("driver gone from the CSINode: %v, want %s", st, ReasonDriverNotRegistered)
	}

	// Registered again with a key the node has no label for.
	cn := csiNode("n1", nil, driver)
	cn.Spec.Drivers[0].TopologyKeys = []string{"example.com/rack"}
	if err := w.csiNodes.Update(cn); err != nil {
		t.Fatal(err)
	}
	if st := filter(moved); st == nil || st.Reason != ReasonTopologyLabelMissing {
		t.Errorf("driver key without a node label: %v, want %s", st, ReasonTopologyLabelMissing)
	}
}

// countingCapacities counts the lookups of a CapacitySource and passes on
// its KeySets when it has them.
type countingCapacities struct {
	CapacitySource
	calls atomic.Int64
}

func (c *countingCapacities) Capacity(class string, labels map[string]string) (Capacity, bool) {
	c.calls.Add(1)
	return c.CapacitySource.Capacity(class, labels)
}

func (c *countingCapacities) KeySets(class string) ([][]string, bool) {
	return c.CapacitySource.(KeySetSource).KeySets(class)
}

// TestCapacityViewPerSegment: in one cycle, the nodes of a segment share
// one lookup of each class's capacity, for Filter and Score alike.
func TestCapacityViewPerSegment(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"), class("slow"))
	var nodes []*v1.Node
	for i := 0; i < 12; i++ {
		n := node(fmt.Sprintf("n%d", i), fmt.Sprintf("z%d", i%3))
		nodes = append(nodes, n)
		w.add(t, w.nodes, n)
		w.add(t, w.csiNodes, csiNode(n.Name, nil, driver))
	}
	for _, z := range []string{"z0", "z1", "z2"} {
		w.add(t, w.capacities, capacity("fast", z, 10*gi), capacity("slow", z, 10*gi))
	}
	w.add(t, w.claims, claim("a", "fast", gi), claim("b", "slow", gi))
	c := w.core(t, nil)
	counting := &countingCapacities{CapacitySource: c.l.Capacities}
	c.l.Capacities = counting
	podVols, err := c.PodVolumes(pod("p", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if st := c.Filter(podVols, n); st != nil {
			t.Fatalf("%s: %v", n.Name, st)
		}
		if s := c.Score(podVols, n); s != 90 {
			t.Errorf("%s: score %d, want 90", n.Name, s)
		}
	}
	if got := counting.calls.Load(); got != 6 {
		t.Errorf("%d capacity lookups for 12 nodes in 3 segments and 2 classes, want 6", got)
	}
}

// TestCapacityViewPerNode: when a class's capacity objects select nodes by
// a label that is not a driver key, or by matchExpressions, two nodes of
// one segment may see different capacity, and each gets its own answer.
func TestCapacityViewPerNode(t *testing.T) {
	const host = "kubernetes.io/hostname"
	byHost := func(name, nodeName string, bytes int64) *storagev1.CSIStorageCapacity {
		return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: name}, StorageClassName: "fast",
			NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{host: nodeName}},
			Capacity:     resource.NewQuantity(bytes, resource.BinarySI)}
	}
	byExpression := func(name, nodeName string, bytes int64) *storagev1.CSIStorageCapacity {
		c := byHost(name, nodeName, bytes)
		c.NodeTopology = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: host, Operator: metav1.LabelSelectorOpIn, Values: []string{nodeName}}}}
		return c
	}
	for _, tc := range []struct {
		name string
		make func(name, nodeName string, bytes int64) *storagev1.CSIStorageCapacity
	}{
		{name: "matchLabels on another key", make: byHost},
		{name: "matchExpressions", make: byExpression},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			withCounterIndexes(t, w)
			w.add(t, w.classes, class("fast"))
			var nodes []*v1.Node
			for _, name := range []string{"roomy", "full"} {
				n := node(name, "z1")
				n.Labels[host] = name
				nodes = append(nodes, n)
				w.add(t, w.nodes, n)
				w.add(t, w.csiNodes, csiNode(name, nil, driver))
			}
			w.add(t, w.capacities, tc.make("c-roomy", "roomy", 10*gi), tc.make("c-full", "full", gi))
			w.add(t, w.claims, claim("a", "fast", 4*gi))
			c := w.core(t, nil)
			// Both orders: whichever node comes first must not decide
			// for the other.
			for _, order := range [][]*v1.Node{nodes, {nodes[1], nodes[0]}} {
				podVols, err := c.PodVolumes(pod("p", "a"))
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range order {
					st := c.Filter(podVols, n)
					if n.Name == "roomy" && st != nil {
						t.Errorf("roomy (10 Gi free): %v", st)
					}
					if n.Name == "full" && (st == nil || st.Reason != ReasonInsufficientCapacity) {
						t.Errorf("full (1 Gi free): %v, want %s", st, ReasonInsufficientCapacity)
					}
				}
				if s := c.Score(podVols, nodes[0]); s != 60 {
					t.Errorf("roomy scores %d, want 60", s)
				}
			}
		})
	}
}

// TestAttachLimitFollowsObjects: the attach limit cached with a node's
// segment follows a new CSINode (its allocatable count) and, when the
// CSINode has none, a new Node (its allocatable attachable-volumes-csi-*).
func TestAttachLimitFollowsObjects(t *testing.T) {
	w, c := limitWorld(t, 3) // n1 counts 2 volumes
	n1 := node("n1", "z1")
	filter := func(n *v1.Node) *Status {
		t.Helper()
		podVols, err := c.PodVolumes(pod("p", "new1"))
		if err != nil {
			t.Fatal(err)
		}
		return c.Filter(podVols, n)
	}
	if st := filter(n1); st != nil {
		t.Fatalf("limit 3, 2 used: %v", st)
	}
	if err := w.csiNodes.Update(csiNode("n1", ptr.To[int32](2), driver)); err != nil {
		t.Fatal(err)
	}
	if st := filter(n1); st == nil || st.Reason != ReasonVolumeLimitExceeded {
		t.Errorf("CSINode limit lowered to 2: %v, want %s", st, ReasonVolumeLimitExceeded)
	}

	// No count in the CSINode: the Node's allocatable is the limit.
	if err := w.csiNodes.Update(csiNode("n1", nil, driver)); err != nil {
		t.Fatal(err)
	}
	withAllocatable := func(n int64) *v1.Node {
		nd := node("n1", "z1")
		nd.Status.Allocatable = v1.ResourceList{v1.ResourceName("attachable-volumes-csi-" + driver): *resource.NewQuantity(n, resource.DecimalSI)}
		return nd
	}
	if st := filter(withAllocatable(2)); st == nil || st.Reason != ReasonVolumeLimitExceeded {
		t.Errorf("Node allocatable 2: %v, want %s", st, ReasonVolumeLimitExceeded)
	}
	if st := filter(withAllocatable(5)); st != nil {
		t.Errorf("Node allocatable 5: %v, want fit", st)
	}
	if st := filter(n1); st != nil {
		t.Errorf("no limit anywhere: %v, want fit", st)
	}
}

// TestTrackedSegmentFollowsCSINodeEvents: on a Core told that every CSINode
// event reaches CSINodeChanged, a cached segment is trusted without reading
// the CSINode lister, dropped by CSINodeChanged, and an entry computed
// before a CSINodeChanged (from the CSINode it replaced) is not stored.
func TestTrackedSegmentFollowsCSINodeEvents(t *testing.T) {
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	n1 := node("n1", "z1")
	w.add(t, w.nodes, n1)
	w.add(t, w.csiNodes, csiNode("n1", nil, driver))
	w.add(t, w.capacities, capacity("fast", "z1", 10*gi))
	w.add(t, w.claims, claim("a", "fast", gi))
	c := w.coreWith(t, Config{Driver: driver, CSINodeEvents: true}, nil)
	podVols, err := c.PodVolumes(pod("p", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if st := c.Filter(podVols, n1); st != nil {
		t.Fatalf("registered driver: %v", st)
	}

	// The CSINode changes but its event has not been handled yet: the
	// cached segment stands (the lister is not read).
	if err := w.csiNodes.Update(csiNode("n1", nil, "other.example.com")); err != nil {
		t.Fatal(err)
	}
	if st := c.Filter(podVols, n1); st != nil {
		t.Fatalf("before the CSINode event: %v, want the cached segment", st)
	}
	c.CSINodeChanged("n1")
	if st := c.Filter(podVols, n1); st == nil || st.Reason != ReasonDriverNotRegistered {
		t.Fatalf("after the CSINode event: %v, want %s", st, ReasonDriverNotRegistered)
	}

	// An entry whose computation began before an event is not cached.
	if err := w.csiNodes.Update(csiNode("n1", nil, driver)); err != nil {
		t.Fatal(err)
	}
	since := c.segments.epoch.Load()
	stale := computeSegment(c, n1, csiNode("n1", nil, "other.example.com"))
	c.CSINodeChanged("n1")
	c.segments.put(stale, since)
	if ns := c.nodeSegment(n1); ns == stale || ns.st != nil {
		t.Fatalf("entry computed before the event was cached: %+v", ns)
	}
	if again := c.nodeSegment(n1); again != c.nodeSegment(n1) {
		t.Errorf("the recomputed entry is not cached")
	}
}

// TestNodeSegmentsStore: entries stay readable across the merges of dirty
// into snap, a forgotten entry is gone from both, an entry computed before
// a forget is refused, and the nodes of one segment share its keys and key.
func TestNodeSegmentsStore(t *testing.T) {
	var s nodeSegments
	nodes := make([]*v1.Node, 1000)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("n%d", i), fmt.Sprintf("z%d", i%3))
		seg := topologySegment(fmt.Sprintf("z%d", i%3))
		s.put(&nodeSegment{node: nodes[i], keys: []string{"topology.example.com/zone"}, seg: strings.Clone(seg)}, 0)
	}
	if m := s.snap.Load(); m == nil || len(*m)+len(s.dirty) != len(nodes) || len(s.dirty) >= len(*m) {
		t.Fatalf("snap and dirty after %d puts: %v, %d", len(nodes), m != nil, len(s.dirty))
	}
	first := s.get(nodes[0], nil, true)
	for i, n := range nodes {
		ns := s.get(n, nil, true)
		if ns == nil || ns.node != n {
			t.Fatalf("%s: entry %+v", n.Name, ns)
		}
		if i%3 == 0 && (&ns.keys[0] != &first.keys[0] || unsafe.StringData(ns.seg) != unsafe.StringData(first.seg)) {
			t.Errorf("%s does not share its segment's keys and key with %s", n.Name, nodes[0].Name)
		}
	}
	if s.get(node("n1", "z1"), nil, true) != nil {
		t.Error("an entry is returned for another Node object of the same name")
	}

	since := s.epoch.Load()
	s.forget("n5")
	if s.get(nodes[5], nil, true) != nil {
		t.Error("n5 is still cached after forget")
	}
	s.put(&nodeSegment{node: nodes[5]}, since)
	if s.get(nodes[5], nil, true) != nil {
		t.Error("an entry computed before forget was stored")
	}
	for i := 0; i < 2*mergeEvery+len(nodes)/4; i++ {
		s.put(&nodeSegment{node: node(fmt.Sprintf("m%d", i), "z0"), st: &Status{}}, s.epoch.Load())
	}
	if m := s.snap.Load(); (*m)["n5"] != nil || s.get(nodes[6], nil, true) == nil {
		t.Errorf("after a merge: n5 %v, n6 %v", (*m)["n5"], s.get(nodes[6], nil, true))
	}
}
