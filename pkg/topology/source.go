package topology

import (
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Reach is where a data source (the volume a clone copies, or the volume a
// snapshot was taken of) can be read from: the required node affinity of
// its PV. A nil Reach, or one without required terms, is unconstrained.
//
// The same rule serves the provisioner (a clone's requisite segments) and
// the scheduler filter (which nodes a pod with a clone claim may go to), so
// that both agree on what "reachable" means.
type Reach struct {
	// Affinity is the source PV's spec.nodeAffinity.
	Affinity *v1.VolumeNodeAffinity
}

// Constrained says whether the source restricts where a copy can be made.
func (r Reach) Constrained() bool {
	return r.Affinity != nil && r.Affinity.Required != nil && len(r.Affinity.Required.NodeSelectorTerms) > 0
}

// Node says whether a node with these labels can reach the source: some
// term of the required node affinity matches them (terms are ORed, the
// expressions of a term ANDed, as for a PV's nodeAffinity in kube-scheduler's
// volume binding). A term without expressions matches nothing. Fields
// (matchFields) name a node: metadata.name is compared with nodeName.
func (r Reach) Node(nodeName string, labels map[string]string) bool {
	if !r.Constrained() {
		return true
	}
	for _, term := range r.Affinity.Required.NodeSelectorTerms {
		if termMatchesNode(term, nodeName, labels) {
			return true
		}
	}
	return false
}

// Segment says whether a topology segment can reach the source: some term's
// expressions all hold on the segment's keys. An expression on a key the
// segment does not have cannot be decided from the segment alone: it counts
// as satisfied, because the driver, which knows where the source is, has
// the last word; a term on matchFields (a node name) does not match a
// segment.
func (r Reach) Segment(seg Segment) bool {
	if !r.Constrained() {
		return true
	}
	for _, term := range r.Affinity.Required.NodeSelectorTerms {
		if len(term.MatchFields) > 0 || len(term.MatchExpressions) == 0 {
			continue
		}
		ok := true
		for _, req := range term.MatchExpressions {
			v, has := seg[req.Key]
			if has && !requirementHolds(req, v, true) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// String describes where the source can be read from, in node-selector
// words: the required terms joined by " or ", the expressions of a term by
// ", ", e.g. "zone in (z1)" or "zone in (z1), rack in (r1) or zone in (z2)";
// "anywhere" when unconstrained.
func (r Reach) String() string {
	if !r.Constrained() {
		return "anywhere"
	}
	terms := make([]string, 0, len(r.Affinity.Required.NodeSelectorTerms))
	for _, term := range r.Affinity.Required.NodeSelectorTerms {
		var exprs []string
		for _, e := range term.MatchExpressions {
			exprs = append(exprs, requirementString(e.Key, e))
		}
		for _, f := range term.MatchFields {
			exprs = append(exprs, requirementString("node "+f.Key, f))
		}
		if len(exprs) == 0 {
			exprs = append(exprs, "(an empty term, matching no node)")
		}
		terms = append(terms, strings.Join(exprs, ", "))
	}
	return strings.Join(terms, " or ")
}

func requirementString(key string, req v1.NodeSelectorRequirement) string {
	op := strings.ToLower(string(req.Operator))
	switch req.Operator {
	case v1.NodeSelectorOpExists, v1.NodeSelectorOpDoesNotExist:
		return key + " " + op
	case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
		return key + " " + op + " " + strings.Join(req.Values, ",")
	}
	return key + " " + op + " (" + strings.Join(req.Values, ",") + ")"
}

// FilterSegments keeps the segments that can reach the source, in order.
func (r Reach) FilterSegments(segs []Segment) []Segment {
	if !r.Constrained() {
		return segs
	}
	out := make([]Segment, 0, len(segs))
	for _, s := range segs {
		if r.Segment(s) {
			out = append(out, s)
		}
	}
	return out
}

func termMatchesNode(term v1.NodeSelectorTerm, nodeName string, labels map[string]string) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, req := range term.MatchExpressions {
		v, has := labels[req.Key]
		if !requirementHolds(req, v, has) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		if f.Key != "metadata.name" {
			return false
		}
		if !requirementHolds(f, nodeName, true) {
			return false
		}
	}
	return true
}

// requirementHolds evaluates one node selector requirement on a value that
// the node has (has) or not. Unknown operators match nothing.
func requirementHolds(req v1.NodeSelectorRequirement, value string, has bool) bool {
	switch req.Operator {
	case v1.NodeSelectorOpIn:
		return has && slices.Contains(req.Values, value)
	case v1.NodeSelectorOpNotIn:
		return !has || !slices.Contains(req.Values, value)
	case v1.NodeSelectorOpExists:
		return has
	case v1.NodeSelectorOpDoesNotExist:
		return !has
	case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
		if !has || len(req.Values) != 1 {
			return false
		}
		got, err1 := strconv.ParseInt(value, 10, 64)
		want, err2 := strconv.ParseInt(req.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if req.Operator == v1.NodeSelectorOpGt {
			return got > want
		}
		return got < want
	}
	return false
}
