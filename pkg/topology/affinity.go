package topology

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

// NodeAffinity builds a PV's node affinity from Volume.accessible_topology:
// one NodeSelectorTerm per topology (terms are ORed), one `In` expression per
// key (expressions are ANDed), keys sorted, terms sorted and de-duplicated,
// so that the same volume always gives the same PV. Empty topologies give nil.
func NodeAffinity(topologies []*csi.Topology) *v1.VolumeNodeAffinity {
	segs := make([]Segment, 0, len(topologies))
	for _, t := range topologies {
		if len(t.GetSegments()) > 0 {
			segs = append(segs, Segment(t.GetSegments()))
		}
	}
	if len(segs) == 0 {
		return nil
	}
	segs = sortSegments(segs)
	terms := make([]v1.NodeSelectorTerm, 0, len(segs))
	for _, s := range segs {
		exprs := make([]v1.NodeSelectorRequirement, 0, len(s))
		for _, k := range s.Keys() {
			exprs = append(exprs, v1.NodeSelectorRequirement{
				Key:      k,
				Operator: v1.NodeSelectorOpIn,
				Values:   []string{s[k]},
			})
		}
		terms = append(terms, v1.NodeSelectorTerm{MatchExpressions: exprs})
	}
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}
}
