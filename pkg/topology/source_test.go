package topology

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func reachOf(terms ...v1.NodeSelectorTerm) Reach {
	return Reach{Affinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}}
}

func in(key string, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}
}

func TestReachNode(t *testing.T) {
	zoneZ1 := reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z1")}})
	twoTerms := reachOf(
		v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z1"), in("rack", "r1")}},
		v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z2")}},
	)
	byName := reachOf(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}})
	ops := reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
		{Key: "tier", Operator: v1.NodeSelectorOpNotIn, Values: []string{"cold"}},
		{Key: "ssd", Operator: v1.NodeSelectorOpExists},
		{Key: "tainted", Operator: v1.NodeSelectorOpDoesNotExist},
		{Key: "gen", Operator: v1.NodeSelectorOpGt, Values: []string{"3"}},
	}})
	for _, tc := range []struct {
		name   string
		reach  Reach
		node   string
		labels map[string]string
		want   bool
	}{
		{"unconstrained", Reach{}, "n1", nil, true},
		{"no required terms", Reach{Affinity: &v1.VolumeNodeAffinity{}}, "n1", nil, true},
		{"in", zoneZ1, "n1", map[string]string{"zone": "z1"}, true},
		{"other value", zoneZ1, "n1", map[string]string{"zone": "z2"}, false},
		{"label missing", zoneZ1, "n1", map[string]string{"rack": "r1"}, false},
		{"first term, all expressions", twoTerms, "n1", map[string]string{"zone": "z1", "rack": "r1"}, true},
		{"first term, one expression fails", twoTerms, "n1", map[string]string{"zone": "z1", "rack": "r2"}, false},
		{"second term", twoTerms, "n1", map[string]string{"zone": "z2"}, true},
		{"match fields", byName, "n1", nil, true},
		{"match fields, other node", byName, "n2", nil, false},
		{"operators hold", ops, "n1", map[string]string{"tier": "hot", "ssd": "", "gen": "4"}, true},
		{"NotIn fails", ops, "n1", map[string]string{"tier": "cold", "ssd": "", "gen": "4"}, false},
		{"Exists fails", ops, "n1", map[string]string{"gen": "4"}, false},
		{"DoesNotExist fails", ops, "n1", map[string]string{"ssd": "", "tainted": "yes", "gen": "4"}, false},
		{"Gt fails", ops, "n1", map[string]string{"ssd": "", "gen": "3"}, false},
		{"Gt not a number", ops, "n1", map[string]string{"ssd": "", "gen": "x"}, false},
		{"empty term matches nothing", reachOf(v1.NodeSelectorTerm{}), "n1", map[string]string{"zone": "z1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.reach.Node(tc.node, tc.labels); got != tc.want {
				t.Errorf("Node(%q, %v) = %v, want %v", tc.node, tc.labels, got, tc.want)
			}
		})
	}
}

func TestReachSegments(t *testing.T) {
	r := reachOf(
		v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z1"), in("rack", "r1")}},
		v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}},
	)
	segs := []Segment{
		{"zone": "z1", "rack": "r1"},
		{"zone": "z1", "rack": "r2"},
		{"zone": "z1"}, // rack undecidable from the segment: the driver decides
		{"zone": "z2"},
		{"region": "eu"}, // no key of the term: undecidable, kept
	}
	got := r.FilterSegments(segs)
	want := []Segment{segs[0], segs[2], segs[4]}
	if len(got) != len(want) {
		t.Fatalf("FilterSegments = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("FilterSegments = %v, want %v", got, want)
		}
	}
	if out := (Reach{}).FilterSegments(segs); len(out) != len(segs) {
		t.Errorf("unconstrained FilterSegments dropped segments: %v", out)
	}
	if reachOf(v1.NodeSelectorTerm{}).Segment(Segment{"zone": "z1"}) {
		t.Error("a term without expressions matched a segment")
	}
}
