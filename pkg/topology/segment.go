package topology

import (
	"sort"
	"strings"
)

// Segment is one topology segment: topology key -> value, for example
// {"topology.mock.csi.example.com/zone": "z1"}.
type Segment map[string]string

// String returns the segment as "k1=v1,k2=v2" with keys sorted; equal
// segments give equal strings.
func (s Segment) String() string {
	keys := s.Keys()
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s[k])
	}
	return b.String()
}

// Keys returns the segment's keys, sorted.
func (s Segment) Keys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Equal reports whether s and o hold the same pairs.
func (s Segment) Equal(o Segment) bool {
	if len(s) != len(o) {
		return false
	}
	for k, v := range s {
		if ov, ok := o[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

// Project returns the part of s whose keys are in keys, or false when s
// lacks one of them. With node labels as s, it is the node's segment for a
// driver's topology keys: Segment{zone: z1, rack: r1, hostname: n1}
// projected on [zone] is {zone: z1}.
func (s Segment) Project(keys []string) (Segment, bool) {
	out := make(Segment, len(keys))
	for _, k := range keys {
		v, ok := s[k]
		if !ok {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

// segmentFromLabels builds the segment of a node for keys, or returns the
// first key the labels lack.
func segmentFromLabels(labels map[string]string, keys []string) (Segment, string) {
	seg := make(Segment, len(keys))
	for _, k := range keys {
		v, ok := labels[k]
		if !ok {
			return nil, k
		}
		seg[k] = v
	}
	return seg, ""
}

// sortSegments sorts segments by String and removes duplicates.
func sortSegments(segs []Segment) []Segment {
	type keyed struct {
		key string
		seg Segment
	}
	ks := make([]keyed, 0, len(segs))
	for _, s := range segs {
		ks = append(ks, keyed{s.String(), s})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]Segment, 0, len(ks))
	for i, k := range ks {
		if i > 0 && k.key == ks[i-1].key {
			continue
		}
		out = append(out, k.seg)
	}
	return out
}

// keySetID is the canonical string of a sorted key set.
func keySetID(sortedKeys []string) string {
	return strings.Join(sortedKeys, "\x00")
}
