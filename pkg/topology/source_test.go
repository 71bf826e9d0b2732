package topology

import (
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
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

func TestReachString(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reach Reach
		want  string
	}{
		{"unconstrained", Reach{}, "anywhere"},
		{"one term", reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z1")}}), "zone in (z1)"},
		{"two terms", reachOf(
			v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z1"), in("rack", "r1", "r2")}},
			v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}},
		), "zone in (z1), rack in (r1,r2) or node metadata.name in (n1)"},
		{"operators", reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "ssd", Operator: v1.NodeSelectorOpExists},
			{Key: "gen", Operator: v1.NodeSelectorOpGt, Values: []string{"3"}},
		}}), "ssd exists, gen gt 3"},
		{"empty term", reachOf(v1.NodeSelectorTerm{}), "(an empty term, matching no node)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.reach.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRequirementsSource(t *testing.T) {
	zones := zonalIndex([]string{"z1", "z2", "z3"}, 2)
	inZ1 := reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in(zoneKey, "z1")}})
	inZ9 := reachOf(v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in(zoneKey, "z9")}})
	nodeZ1 := makeNode("a", map[string]string{zoneKey: "z1"})
	nodeZ2 := makeNode("b", map[string]string{zoneKey: "z2"})
	csiNode := func(name string) *storagev1.CSINode { return makeCSINode(name, testDriver, zoneKey) }
	z1 := csiTopo(seg(zoneKey, "z1"))
	for _, tc := range []struct {
		name       string
		in         RequirementsInput
		want       *csi.TopologyRequirement
		wantReason NodeReason
		wantErr    error
		wantText   string
	}{
		{
			name: "delayed, node reaches the source: only segments that reach it",
			in:   RequirementsInput{SelectedNode: nodeZ1, SelectedNodeName: "a", CSINode: csiNode("a"), Source: inZ1},
			want: &csi.TopologyRequirement{Requisite: z1, Preferred: z1},
		},
		{
			name:       "delayed, node in another zone: back to the scheduler, naming the source and where it is",
			in:         RequirementsInput{SelectedNode: nodeZ2, SelectedNodeName: "b", CSINode: csiNode("b"), Source: inZ1, SourceName: `PersistentVolumeClaim "ns/src"`},
			wantReason: SourceUnreachable,
			wantText:   `cannot reach the data source PersistentVolumeClaim "ns/src", whose volume is accessible from ` + zoneKey + ` in (z1) only`,
		},
		{
			name: "delayed, strict, node reaches the source",
			in:   RequirementsInput{SelectedNode: nodeZ1, SelectedNodeName: "a", CSINode: csiNode("a"), Source: inZ1, Strict: true},
			want: &csi.TopologyRequirement{Requisite: z1, Preferred: z1},
		},
		{
			name: "delayed, unconstrained source: every zone",
			in:   RequirementsInput{SelectedNode: nodeZ1, SelectedNodeName: "a", CSINode: csiNode("a")},
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z2"), seg(zoneKey, "z3")),
				Preferred: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z2"), seg(zoneKey, "z3")),
			},
		},
		{
			name: "immediate, all known segments narrowed to the source's",
			in:   RequirementsInput{Immediate: true, Source: inZ1, ClaimName: "c"},
			want: &csi.TopologyRequirement{Requisite: z1, Preferred: z1},
		},
		{
			name: "immediate without --immediate-topology: the source still narrows the known segments",
			in:   RequirementsInput{Source: inZ1, ClaimName: "c"},
			want: &csi.TopologyRequirement{Requisite: z1, Preferred: z1},
		},
		{
			name: "immediate, allowedTopologies outside the source's zone",
			in: RequirementsInput{Source: inZ1, SourceName: `VolumeSnapshot "ns/snap"`,
				AllowedTopologies: []v1.TopologySelectorTerm{term(expr(zoneKey, "z2", "z3"))}},
			wantErr:  ErrSourceUnreachable,
			wantText: `VolumeSnapshot "ns/snap" is accessible from ` + zoneKey + ` in (z1) only, and none of the 2 segment(s)`,
		},
		{
			name:     "immediate, source in a zone no node knows",
			in:       RequirementsInput{Immediate: true, Source: inZ9},
			wantErr:  ErrSourceUnreachable,
			wantText: "none of the 3 segment(s)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Driver, tc.in.Index = testDriver, zones
			got, err := Requirements(tc.in)
			switch {
			case tc.wantReason != "":
				var ne *NodeError
				if !errors.As(err, &ne) || ne.Reason != tc.wantReason {
					t.Fatalf("error = %v, want a NodeError %s", err, tc.wantReason)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error = %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.wantText != "" && !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not say %q", err, tc.wantText)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("requirements (-want +got):\n%s", diff)
			}
		})
	}
}
