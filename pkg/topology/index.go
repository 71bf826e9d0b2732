package topology

import (
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Index holds the distinct topology segments that the nodes of one driver
// form, maintained incrementally from Node and CSINode events, so that a
// claim's requirements cost O(segments), never O(nodes).
//
// A node contributes one segment when its CSINode lists the driver and its
// labels carry a value for each of the driver's topology keys. Segments are
// reference-counted per key set; the sorted slice Segments returns is cached
// and rebuilt only after the set of segments changed.
//
// For a class's allowedTopologies, the segments a claim may ask for are those
// where at least one contributing node satisfies a whole term, labels that
// are not driver keys included (see Requirements). The index keeps these per
// distinct allowedTopologies (a term set, keyed by a canonical string of its
// terms): the first claim that uses one registers it, walking the nodes once;
// from then on the set keeps, per key set and segment, a count of the
// contributing nodes that satisfy its terms, and every Node or CSINode event
// re-evaluates that one node against each registered set: O(term sets) per
// event, O(size of terms) per claim. The sorted segments per term set and key
// set are cached until a count goes to or from zero. At most 64 term sets are
// kept; the least recently used one is dropped and registered again when a
// claim needs it.
//
// Example: driver key zone; a class with
// [{zone in (z1,z2), example.com/pool in (gold)}]; nodes a (z1, gold),
// b (z1), c (z2). On registration only a satisfies the term: counts
// {zone=z1: 1}, segments [zone=z1]. c is labelled pool=gold: its
// contribution (zone=z2) is unchanged but it now satisfies the term, so
// counts become {zone=z1: 1, zone=z2: 1}. a is deleted: {zone=z2: 1}, and z1
// is no longer allowed although b is still in it.
//
// All methods are safe for concurrent use. Objects passed in are only read
// and may be shared with an informer cache.
type Index struct {
	driver string

	mu sync.Mutex
	// labels and keys hold what the index knows of each node.
	labels map[string]map[string]string
	keys   map[string][]string
	// contrib is the segment each node currently contributes.
	contrib map[string]contribution
	// sets holds the segments per key set.
	sets segmentSets
	// terms holds the registered allowedTopologies term sets by termsID;
	// tick orders their use, for eviction.
	terms       map[string]*termSet
	tick        uint64
	maxTermSets int
	// onNew is told of each segment that appears; fresh collects them
	// under mu until the lock is released.
	onNew func(Segment)
	fresh []Segment
}

type contribution struct {
	keySet  string
	segment string
}

type segmentSet struct {
	keys   []string
	counts map[string]int
	segs   map[string]Segment
	sorted []Segment // nil when it must be rebuilt
}

// NewIndex returns an empty index for driver.
func NewIndex(driver string) *Index {
	return &Index{
		driver:  driver,
		labels:  map[string]map[string]string{},
		keys:    map[string][]string{},
		contrib: map[string]contribution{},
		sets:    segmentSets{},
		terms:   map[string]*termSet{},

		maxTermSets: defaultMaxTermSets,
	}
}

// OnNewSegment registers f, called with each segment that appears (the
// first node to form it), outside the index's lock and on the goroutine that
// fed the event. Register before feeding events; f must not block.
func (i *Index) OnNewSegment(f func(Segment)) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.onNew = f
}

// update runs change under the lock, then tells onNew of the segments it
// made appear.
func (i *Index) update(change func()) {
	i.mu.Lock()
	change()
	fresh, onNew := i.fresh, i.onNew
	i.fresh = nil
	i.mu.Unlock()
	if onNew != nil {
		for _, s := range fresh {
			onNew(s)
		}
	}
}

// UpsertNode records a node's labels (on add and update).
func (i *Index) UpsertNode(node *v1.Node) { i.UpsertNodeLabels(node.Name, node.Labels) }

// UpsertNodeLabels records the labels of node name (on add and update):
// UpsertNode for a cache that holds a node's metadata only. labels are
// kept as they are: the caller must not modify them afterwards.
func (i *Index) UpsertNodeLabels(name string, labels map[string]string) {
	i.update(func() {
		i.labels[name] = labels
		i.recompute(name)
	})
}

// DeleteNode forgets a node's labels.
func (i *Index) DeleteNode(name string) {
	i.update(func() {
		delete(i.labels, name)
		i.recompute(name)
	})
}

// UpsertCSINode records the driver's topology keys on a node (on add and
// update). A CSINode without an entry for the driver removes the node's keys.
func (i *Index) UpsertCSINode(csiNode *storagev1.CSINode) {
	i.update(func() {
		if keys, err := DriverKeys(csiNode, i.driver); err == nil {
			i.keys[csiNode.Name] = keys
		} else {
			delete(i.keys, csiNode.Name)
		}
		i.recompute(csiNode.Name)
	})
}

// DeleteCSINode forgets the driver's keys on a node.
func (i *Index) DeleteCSINode(name string) {
	i.update(func() {
		delete(i.keys, name)
		i.recompute(name)
	})
}

// recompute moves node's contribution to what its labels and keys say now,
// and its membership in every registered term set: the latter even when the
// contribution is unchanged, since labels that are not driver keys may have
// changed. Called with mu held.
func (i *Index) recompute(node string) {
	old, had := i.contrib[node]
	var now contribution
	var seg Segment
	keys, hasKeys := i.keys[node]
	labels, hasLabels := i.labels[node]
	if hasKeys && hasLabels && len(keys) > 0 {
		if s, missing := segmentFromLabels(labels, keys); missing == "" {
			seg = s
			now = contribution{keySet: keySetID(keys), segment: s.String()}
		}
	}
	if !had || seg == nil || old != now {
		if had {
			i.sets.release(old)
			delete(i.contrib, node)
		}
		if seg != nil {
			i.acquire(now, keys, seg)
			i.contrib[node] = now
		}
	}
	for _, ts := range i.terms {
		ts.update(node, now, keys, seg, seg != nil && MatchLabels(ts.terms, labels))
	}
}

func (i *Index) acquire(c contribution, keys []string, seg Segment) {
	if i.sets.acquire(c, keys, seg) && i.onNew != nil {
		i.fresh = append(i.fresh, seg)
	}
}

// segmentSets holds reference-counted segments per key set (keySetID).
type segmentSets map[string]*segmentSet

// acquire counts one more node in c's segment and reports whether the
// segment is new.
func (m segmentSets) acquire(c contribution, keys []string, seg Segment) bool {
	set, ok := m[c.keySet]
	if !ok {
		set = &segmentSet{keys: keys, counts: map[string]int{}, segs: map[string]Segment{}}
		m[c.keySet] = set
	}
	set.counts[c.segment]++
	if set.counts[c.segment] > 1 {
		return false
	}
	set.segs[c.segment] = seg
	set.sorted = nil
	return true
}

// release counts one node less in c's segment and reports whether the
// segment is gone.
func (m segmentSets) release(c contribution) bool {
	set := m[c.keySet]
	set.counts[c.segment]--
	if set.counts[c.segment] > 0 {
		return false
	}
	delete(set.counts, c.segment)
	delete(set.segs, c.segment)
	set.sorted = nil
	if len(set.counts) == 0 {
		delete(m, c.keySet)
	}
	return true
}

// Segments returns the distinct segments, sorted by Segment.String, of the
// nodes whose CSINode lists the driver with exactly keys and whose labels
// carry all of them. keys need not be sorted. The returned slice and its
// segments are shared: callers must not modify them.
func (i *Index) Segments(keys []string) []Segment {
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	i.mu.Lock()
	defer i.mu.Unlock()
	set, ok := i.sets[keySetID(sorted)]
	if !ok {
		return nil
	}
	return set.sortedSegments()
}

func (s *segmentSet) sortedSegments() []Segment {
	if s.sorted == nil {
		segs := make([]Segment, 0, len(s.segs))
		for _, seg := range s.segs {
			segs = append(segs, seg)
		}
		s.sorted = sortSegments(segs)
	}
	return s.sorted
}

// KeySets returns the distinct topology key sets (each sorted) that nodes of
// the driver report and contribute segments for, sorted.
func (i *Index) KeySets() [][]string {
	i.mu.Lock()
	defer i.mu.Unlock()
	ids := make([]string, 0, len(i.sets))
	for id := range i.sets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([][]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, append([]string(nil), i.sets[id].keys...))
	}
	return out
}

// allSegments returns every known segment of every key set, sorted.
func (i *Index) allSegments() []Segment {
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []Segment
	for _, set := range i.sets {
		out = append(out, set.sortedSegments()...)
	}
	return sortSegments(out)
}

// DriverKeys returns the sorted topology keys of driver in csiNode. A nil
// CSINode or one without an entry for driver gives a *NodeError.
func DriverKeys(csiNode *storagev1.CSINode, driver string) ([]string, error) {
	if csiNode == nil {
		return nil, &NodeError{Reason: CSINodeMissing, Detail: "the node has no CSINode object"}
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == driver {
			keys := append([]string(nil), d.TopologyKeys...)
			sort.Strings(keys)
			return keys, nil
		}
	}
	return nil, nodeError(csiNode.Name, DriverNotRegistered,
		"CSI driver %q is not registered on the node (no entry in its CSINode)", driver)
}
