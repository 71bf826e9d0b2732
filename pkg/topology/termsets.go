package topology

import (
	"sort"

	v1 "k8s.io/api/core/v1"
)

// defaultMaxTermSets bounds how many distinct allowedTopologies an Index
// keeps counts for. Each registered set adds O(1) to every node event; the
// least recently used one is dropped (and rebuilt on its next use) beyond it.
const defaultMaxTermSets = 64

// termSet counts, per key set and segment, the nodes of the driver that
// satisfy one allowedTopologies (see the Index documentation).
type termSet struct {
	// terms is a private copy of the allowedTopologies.
	terms []v1.TopologySelectorTerm
	// members holds the contribution under which each satisfying node is
	// counted, so that it can be released exactly.
	members map[string]contribution
	// sets holds the satisfying nodes' segments per key set.
	sets segmentSets
	// all caches the segments of every key set, sorted; valid when allValid.
	all      []Segment
	allValid bool
	// lastUsed is the Index tick of the last claim that used the set.
	lastUsed uint64
}

// update counts node, contributing c (keys, seg), in the set when satisfied,
// and releases what it was counted under before.
func (ts *termSet) update(node string, c contribution, keys []string, seg Segment, satisfied bool) {
	old, had := ts.members[node]
	if had && satisfied && old == c {
		return
	}
	if had {
		if ts.sets.release(old) {
			ts.allValid = false
		}
		delete(ts.members, node)
	}
	if satisfied {
		if ts.sets.acquire(c, keys, seg) {
			ts.allValid = false
		}
		ts.members[node] = c
	}
}

// allSegments returns the sorted segments of every key set (shared).
func (ts *termSet) allSegments() []Segment {
	if !ts.allValid {
		var segs []Segment
		for _, set := range ts.sets {
			segs = append(segs, set.sortedSegments()...)
		}
		ts.all, ts.allValid = sortSegments(segs), true
	}
	return ts.all
}

// allowed returns the sorted segments with keys (any key set when keys is
// nil) in which at least one node of the driver satisfies terms, and how
// many nodes of the driver contribute a segment at all. The first call with
// a given allowedTopologies registers it (a walk over the index's nodes);
// later calls cost O(size of terms) plus, after a change, a sort of the
// segments. terms must be valid (validateTerms) and non-empty. The returned
// slice and its segments are shared: callers must not modify them.
func (i *Index) allowed(terms []v1.TopologySelectorTerm, keys []string) ([]Segment, int) {
	id := termsID(terms)
	var setID string
	if keys != nil {
		sorted := append([]string(nil), keys...)
		sort.Strings(sorted)
		setID = keySetID(sorted)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	ts := i.termSet(id, terms)
	if keys == nil {
		return ts.allSegments(), len(i.contrib)
	}
	set, ok := ts.sets[setID]
	if !ok {
		return nil, len(i.contrib)
	}
	return set.sortedSegments(), len(i.contrib)
}

// termSet returns the registered set of id, registering terms under it when
// new. Called with mu held.
func (i *Index) termSet(id string, terms []v1.TopologySelectorTerm) *termSet {
	i.tick++
	if ts, ok := i.terms[id]; ok {
		ts.lastUsed = i.tick
		return ts
	}
	if len(i.terms) >= i.maxTermSets {
		i.evictTermSet()
	}
	ts := &termSet{
		terms:    make([]v1.TopologySelectorTerm, 0, len(terms)),
		members:  map[string]contribution{},
		sets:     segmentSets{},
		lastUsed: i.tick,
	}
	for _, t := range terms {
		ts.terms = append(ts.terms, *t.DeepCopy())
	}
	for node, c := range i.contrib {
		if MatchLabels(ts.terms, i.labels[node]) {
			set := i.sets[c.keySet]
			ts.update(node, c, set.keys, set.segs[c.segment], true)
		}
	}
	i.terms[id] = ts
	return ts
}

// evictTermSet drops the least recently used term set. Called with mu held.
func (i *Index) evictTermSet() {
	var oldest *termSet
	var oldestID string
	for id, ts := range i.terms {
		if oldest == nil || ts.lastUsed < oldest.lastUsed {
			oldest, oldestID = ts, id
		}
	}
	delete(i.terms, oldestID)
}
