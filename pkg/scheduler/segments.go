package scheduler

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// What a scheduling cycle costs per node.
//
// kube-scheduler calls Filter and then Score for one pod on hundreds of
// nodes (all of them in small clusters); every call used to rebuild the
// node's segment from its CSINode entry and labels, look the capacity
// objects up and sum the segment's reservations: about 8 µs and 17
// allocations per node and cycle, a quarter more scheduler CPU per pod than
// the stock profile at 1 000 nodes. Two caches remove that work:
//
//   - nodeSegments keeps each node's segment across cycles, valid while
//     the Node object it was computed from is the one the caller holds and
//     its CSINode has not changed. Informer caches replace an object on
//     update and never change it in place, so pointer identity is the
//     Node's version check. The CSINode's is either the same check against
//     the CSINode lister's object (two map reads per hit) or, on a Core
//     built by NewFromInformers, the CSINode event handler, which drops the
//     node's entry: a hit is then one map read. The entry also holds the
//     node's attach limit, read from the same two objects.
//   - PodVolumes.views keeps, for one pod (one cycle), what Filter and
//     Score read of each segment's capacity: the objects' figures, the
//     reservations in flight and the verdict. Nodes of one segment share
//     it, which is exact when the class's capacity objects select nodes by
//     the driver's topology keys only, as csi-provisioner publishes them;
//     for any other selector the view is computed per node.

// maxCachedSegments bounds nodeSegments: past that many distinct node
// names (nodes come and go over months), the cache starts afresh.
const maxCachedSegments = 1 << 15

// nodeSegment is a node's segment for the driver, computed from one
// version of its Node and CSINode.
type nodeSegment struct {
	node    *v1.Node
	csiNode *storagev1.CSINode
	// keys are the driver's topology keys on the node, sorted; shared by
	// the entries of nodes with the same keys.
	keys []string
	// seg is the segment's key (topology.Segment.String), when st is nil;
	// shared by the entries of the segment's nodes.
	seg string
	// st says why the node has no segment.
	st *Status
	// limit is the node's attach limit for the driver (limits.Counter's
	// LimitOf these objects), nil without one or without a counter.
	limit *int64
	// dropped is set when the node's CSINode changed (forget).
	dropped atomic.Bool
}

// nodeSegments caches nodeSegment by node name. Safe for concurrent use.
//
// Filter and Score read it for hundreds of nodes per pod, and at 5 000
// nodes what they touch of it is cold: a read is one lookup in a plain map
// that is never written (snap, swapped whole), with no lock. New entries
// go to dirty, which a read consults under mu only when snap has no valid
// entry, and are merged into a new snap once dirty holds a quarter of
// snap's size (at start-up, the first cycles fill the cache in O(nodes)
// copies overall).
type nodeSegments struct {
	snap atomic.Pointer[map[string]*nodeSegment]
	// tracked says that forget is called on every CSINode event: get then
	// trusts an entry whose Node is current without reading the CSINode.
	// Set by New (Config.CSINodeEvents), read only afterwards.
	tracked bool
	// mu guards dirty and orders put after forget: epoch counts forget
	// calls, and put stores an entry only if none happened since its
	// computation began.
	mu    sync.Mutex
	dirty map[string]*nodeSegment
	epoch atomic.Uint64
	// shared interns keys and seg across entries, under mu. It holds
	// the strings only: an entry would keep its Node and CSINode objects
	// alive after the informers replaced them (with a per-node topology
	// key, one stale Node per node).
	shared map[string]sharedSegment
}

// sharedSegment is a segment's key and topology keys, as entries share them.
type sharedSegment struct {
	seg  string
	keys []string
}

// mergeEvery is the least size of dirty that is merged into snap.
const mergeEvery = 64

// get returns the entry computed from exactly node and, unless tracked,
// csiNode; nil when there is none.
func (s *nodeSegments) get(node *v1.Node, csiNode *storagev1.CSINode, tracked bool) *nodeSegment {
	if m := s.snap.Load(); m != nil {
		if ns := (*m)[node.Name]; ns.validFor(node, csiNode, tracked) {
			return ns
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.dirty[node.Name]; ns.validFor(node, csiNode, tracked) {
		return ns
	}
	return nil
}

// validFor reports whether ns (maybe nil) was computed from node and, unless
// tracked, csiNode, and its CSINode has not changed since.
func (ns *nodeSegment) validFor(node *v1.Node, csiNode *storagev1.CSINode, tracked bool) bool {
	return ns != nil && ns.node == node && !ns.dropped.Load() && (tracked || ns.csiNode == csiNode)
}

// put stores ns, computed from objects read after epoch was since, unless
// a node's CSINode changed since then (it may have been read before the
// change: the next lookup computes it again).
func (s *nodeSegments) put(ns *nodeSegment, since uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch.Load() != since {
		return
	}
	s.intern(ns)
	if s.dirty == nil {
		s.dirty = map[string]*nodeSegment{}
	}
	s.dirty[ns.node.Name] = ns
	var snap map[string]*nodeSegment
	if m := s.snap.Load(); m != nil {
		snap = *m
	}
	if len(s.dirty) < max(mergeEvery, len(snap)/4) {
		return
	}
	size := len(snap) + len(s.dirty)
	if size > maxCachedSegments {
		snap, size = nil, len(s.dirty)
	}
	next := make(map[string]*nodeSegment, size)
	for name, e := range snap {
		if !e.dropped.Load() {
			next[name] = e
		}
	}
	for name, e := range s.dirty {
		next[name] = e
	}
	s.snap.Store(&next)
	s.dirty = nil
	if len(s.shared) > maxCachedSegments {
		s.shared = nil
	}
}

// intern has ns share keys and seg with an earlier entry of its segment,
// so that the nodes of one segment do not each hold their own copies.
// Called under mu.
func (s *nodeSegments) intern(ns *nodeSegment) {
	if ns.st != nil {
		return
	}
	if e, ok := s.shared[ns.seg]; ok && slices.Equal(e.keys, ns.keys) {
		ns.keys, ns.seg = e.keys, e.seg
		return
	}
	if s.shared == nil {
		s.shared = map[string]sharedSegment{}
	}
	s.shared[ns.seg] = sharedSegment{seg: ns.seg, keys: ns.keys}
}

// forget drops the node's entry: its CSINode was added, updated or
// deleted. The informer has already stored the new object, so an entry
// computed after this call reads it.
func (s *nodeSegments) forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch.Add(1)
	if ns := s.dirty[node]; ns != nil {
		ns.dropped.Store(true)
		delete(s.dirty, node)
	}
	if m := s.snap.Load(); m != nil {
		if ns := (*m)[node]; ns != nil {
			ns.dropped.Store(true)
		}
	}
}

// nodeSegment returns the node's segment for the driver, from the cache
// when the node and its CSINode have not changed since it was computed.
func (c *Core) nodeSegment(node *v1.Node) *nodeSegment {
	tracked := c.segments.tracked
	var csiNode *storagev1.CSINode
	if !tracked {
		csiNode = c.csiNode(node.Name)
	}
	if ns := c.segments.get(node, csiNode, tracked); ns != nil {
		return ns
	}
	since := c.segments.epoch.Load()
	if tracked {
		csiNode = c.csiNode(node.Name)
	}
	ns := computeSegment(c, node, csiNode)
	c.segments.put(ns, since)
	return ns
}

// csiNode returns the node's CSINode from the lister, nil when it has none.
func (c *Core) csiNode(node string) *storagev1.CSINode {
	n, err := c.l.CSINodes.Get(node)
	if err != nil {
		return nil
	}
	return n
}

// computeSegment computes the node's segment for the driver from node and
// its CSINode (nil when it has none).
func computeSegment(c *Core, node *v1.Node, csiNode *storagev1.CSINode) *nodeSegment {
	ns := &nodeSegment{node: node, csiNode: csiNode}
	if c.counter != nil {
		ns.limit = c.counter.LimitOf(node, csiNode)
	}
	keys, err := topology.DriverKeys(csiNode, c.cfg.Driver)
	if err != nil {
		ns.st = unresolvable(ReasonDriverNotRegistered, "CSI driver %s is not registered on node %s", c.cfg.Driver, node.Name)
		return ns
	}
	ns.keys = keys
	seg := topology.Segment{}
	for _, k := range keys {
		v, ok := node.Labels[k]
		if !ok {
			ns.st = unresolvable(ReasonTopologyLabelMissing, "node %s has no label %s", node.Name, k)
			return ns
		}
		seg[k] = v
	}
	ns.seg = seg.String()
	return ns
}

// CSINodeChanged tells the Core that the node's CSINode was added, updated
// or deleted. A Core whose owner calls it on every CSINode event (as
// NewFromInformers's handlers do) should say so with Config.CSINodeEvents.
func (c *Core) CSINodeChanged(node string) { c.segments.forget(node) }

// KeySetSource is implemented by a CapacitySource that can tell which node
// labels its answers for a class depend on (NewCapacitySource's does).
// Without it, the Core asks the source for every node.
type KeySetSource interface {
	// KeySets returns the distinct matchLabels key sets (each sorted) of
	// the class's objects, and whether any object of the class selects
	// nodes with matchExpressions.
	KeySets(class string) (sets [][]string, expressions bool)
}

// capacityView is what Filter and Score read of one segment's capacity for
// a pod.
type capacityView struct {
	// st is the capacity verdict (filterCapacity), nil when the pod fits.
	st *Status
	// score is capacityScore's fraction.
	score float64
}

// segmentScope says, for one pod, when nodes of one segment share their
// capacity view: the key sets of the pod's classes' capacity objects.
type segmentScope struct {
	once sync.Once
	// sets are the key sets of all the pod's classes; perNode means a
	// selector with matchExpressions, or a source without KeySets.
	sets    [][]string
	perNode bool
}

// sharedBy reports whether every capacity answer for the pod's classes
// depends only on labels among keys (sorted): the node's segment then
// decides its capacity view.
func (s *segmentScope) sharedBy(c *Core, podVols *PodVolumes, keys []string) bool {
	s.once.Do(func() {
		src, ok := c.l.Capacities.(KeySetSource)
		if !ok {
			s.perNode = true
			return
		}
		for _, class := range podVols.classes {
			sets, expr := src.KeySets(class)
			if expr {
				s.perNode = true
				return
			}
			s.sets = append(s.sets, sets...)
		}
	})
	if s.perNode {
		return false
	}
	for _, set := range s.sets {
		for _, k := range set {
			if i := sort.SearchStrings(keys, k); i == len(keys) || keys[i] != k {
				return false
			}
		}
	}
	return true
}

// capacityView returns the pod's capacity view of the node, whose segment
// is ns: shared by the segment's nodes for this pod when sharedBy says so.
// Callers check that capacity is tracked and the pod has pending claims.
func (c *Core) capacityView(podVols *PodVolumes, node *v1.Node, ns *nodeSegment) *capacityView {
	// A view is stored only for a segment whose nodes share it, and the
	// segment's key names its topology keys: a stored view needs no
	// sharedBy check.
	if v, ok := podVols.views.Load(ns.seg); ok {
		return v.(*capacityView)
	}
	if !podVols.scope.sharedBy(c, podVols, ns.keys) {
		return c.computeView(podVols, node.Labels, ns.seg)
	}
	v, _ := podVols.views.LoadOrStore(ns.seg, c.computeView(podVols, node.Labels, ns.seg))
	return v.(*capacityView)
}

// computeView reads the capacity objects of the pod's classes for a node
// with these labels in segment seg, and the reservations in flight there.
// A class whose capacity is unknown is not checked and scores 0, as does
// one without free capacity; the verdict is that of the first class (in
// name order) that does not fit.
func (c *Core) computeView(podVols *PodVolumes, labels map[string]string, seg string) *capacityView {
	v := &capacityView{}
	var sum float64
	for _, class := range podVols.classes {
		capa, known := c.l.Capacities.Capacity(class, labels)
		if !known {
			continue
		}
		need := podVols.perClass[class]
		reserved := c.ledger.Reserved(seg, class, podVols.own)
		if v.st == nil {
			v.st = capacityVerdict(podVols, class, seg, capa, need, reserved)
		}
		if capa.Free > 0 {
			left := capa.Free - reserved - need
			if left < 0 {
				left = 0
			}
			sum += float64(left) / float64(capa.Free)
		}
	}
	v.score = sum / float64(len(podVols.classes)) // not empty: the pod has pending claims
	return v
}

// capacityVerdict checks one class of the pod against its capacity in the
// segment: each claim against the largest volume, then the class's total
// plus the reservations of others against the free capacity.
func capacityVerdict(podVols *PodVolumes, class, seg string, capa Capacity, need, reserved int64) *Status {
	for _, p := range podVols.Pending {
		if p.Class.Name == class && capa.MaxVolume != nil && p.Bytes > *capa.MaxVolume {
			return unresolvable(ReasonInsufficientCapacity, "claim %s needs %d bytes, above the largest volume (%d) of class %s in segment %s",
				p.Claim.Name, p.Bytes, *capa.MaxVolume, class, seg)
		}
	}
	if need+reserved > capa.Free {
		return unresolvable(ReasonInsufficientCapacity, "segment %s has %d bytes free for class %s, %d reserved in flight; the pod needs %d",
			seg, capa.Free, class, reserved, need)
	}
	return nil
}
