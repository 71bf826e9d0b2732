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

func TestRequirementsDelayed(t *testing.T) {
	zones := zonalIndex([]string{"z1", "z2", "z3"}, 2)
	n1 := makeNode("n1", map[string]string{zoneKey: "z2", "example.com/pool": "gold"})
	n1CSI := makeCSINode("n1", testDriver, zoneKey)

	rackIndex := NewIndex(testDriver)
	for _, n := range []struct{ name, zone, rack string }{
		{"a", "z1", "r1"}, {"b", "z1", "r2"}, {"c", "z2", "r1"}, {"d", "z2", "r2"},
	} {
		rackIndex.UpsertNode(makeNode(n.name, map[string]string{zoneKey: n.zone, rackKey: n.rack}))
		rackIndex.UpsertCSINode(makeCSINode(n.name, testDriver, zoneKey, rackKey))
	}
	zoneRack := []v1.TopologySelectorTerm{
		term(expr(zoneKey, "z1"), expr(rackKey, "r1", "r2")),
		term(expr(zoneKey, "z2"), expr(rackKey, "r1")),
	}
	// Only p1 (z1) and p3 (z3) carry pool=gold.
	pools := NewIndex(testDriver)
	for _, e := range events(
		zonalNode("p1", zoneKey, "z1", poolKey, "gold"), zonalNode("p2", zoneKey, "z1"),
		zonalNode("p3", zoneKey, "z3", poolKey, "gold"), zonalNode("p4", zoneKey, "z2"), zonalNode("p5", zoneKey, "z4"),
	) {
		e(pools)
	}

	tests := []struct {
		name       string
		node       *v1.Node
		csiNode    *storagev1.CSINode
		allowed    []v1.TopologySelectorTerm
		strict     bool
		index      *Index
		want       *csi.TopologyRequirement
		wantReason NodeReason
		wantErr    error
	}{
		{
			name:    "zonal: node segment first, every known zone requisite",
			node:    n1,
			csiNode: n1CSI,
			index:   zones,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z2"), seg(zoneKey, "z3")),
				Preferred: csiTopo(seg(zoneKey, "z2"), seg(zoneKey, "z3"), seg(zoneKey, "z1")),
			},
		},
		{
			name:    "strict: only the node's segment",
			node:    n1,
			csiNode: n1CSI,
			index:   zones,
			strict:  true,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z2")),
				Preferred: csiTopo(seg(zoneKey, "z2")),
			},
		},
		{
			name:    "allowedTopologies filters requisite",
			node:    n1,
			csiNode: n1CSI,
			index:   zones,
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z2", "z3"))},
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z2"), seg(zoneKey, "z3")),
				Preferred: csiTopo(seg(zoneKey, "z2"), seg(zoneKey, "z3")),
			},
		},
		{
			name:    "non-driver label: other segments only where a node satisfies the whole term",
			node:    n1,
			csiNode: n1CSI,
			index:   pools,
			allowed: []v1.TopologySelectorTerm{term(expr(poolKey, "gold"), expr(zoneKey, "z1", "z2", "z4"))},
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z2")),
				Preferred: csiTopo(seg(zoneKey, "z2"), seg(zoneKey, "z1")),
			},
		},
		{
			name:    "non-driver label no other node carries: only the node's segment",
			node:    n1,
			csiNode: n1CSI,
			index:   zones,
			allowed: []v1.TopologySelectorTerm{term(expr(poolKey, "gold"), expr(zoneKey, "z1", "z2"))},
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z2")),
				Preferred: csiTopo(seg(zoneKey, "z2")),
			},
		},
		{
			name:    "node segment is requisite even before the index sees it",
			node:    makeNode("new", map[string]string{zoneKey: "z9"}),
			csiNode: makeCSINode("new", testDriver, zoneKey),
			index:   NewIndex(testDriver),
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z9")),
				Preferred: csiTopo(seg(zoneKey, "z9")),
			},
		},
		{
			name:    "zone x rack: three allowed combinations",
			node:    makeNode("b", map[string]string{zoneKey: "z1", rackKey: "r2"}),
			csiNode: makeCSINode("b", testDriver, rackKey, zoneKey),
			index:   rackIndex,
			allowed: zoneRack,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1", rackKey, "r1"), seg(zoneKey, "z2", rackKey, "r1"), seg(zoneKey, "z1", rackKey, "r2")),
				Preferred: csiTopo(seg(zoneKey, "z1", rackKey, "r2"), seg(zoneKey, "z1", rackKey, "r1"), seg(zoneKey, "z2", rackKey, "r1")),
			},
		},
		{
			name:    "driver without topology keys on the node: no requirements",
			node:    n1,
			csiNode: makeCSINode("n1", testDriver),
			index:   zones,
			want:    nil,
		},
		{name: "node gone", node: nil, index: zones, wantReason: NodeNotFound},
		{name: "no CSINode", node: n1, index: zones, wantReason: CSINodeMissing},
		{name: "driver not registered", node: n1, csiNode: makeCSINode("n1", "other.example.com", zoneKey), index: zones, wantReason: DriverNotRegistered},
		{name: "topology label missing", node: makeNode("n1", nil), csiNode: n1CSI, index: zones, wantReason: TopologyLabelMissing},
		{
			name: "outside allowedTopologies", node: n1, csiNode: n1CSI, index: zones,
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z1", "z3"))}, wantReason: OutsideAllowedTopologies,
		},
		{
			name: "invalid allowedTopologies is a configuration error", node: n1, csiNode: n1CSI, index: zones,
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey))}, wantErr: ErrInvalidTopology,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Requirements(RequirementsInput{
				Driver:            testDriver,
				SelectedNode:      tc.node,
				SelectedNodeName:  "n1",
				CSINode:           tc.csiNode,
				AllowedTopologies: tc.allowed,
				Strict:            tc.strict,
				Index:             tc.index,
				ClaimName:         "data-0",
			})
			if tc.wantReason != "" {
				var ne *NodeError
				if !errors.As(err, &ne) || ne.Reason != tc.wantReason || !errors.Is(err, ErrNodeIneligible) {
					t.Fatalf("error = %v, want NodeError %s", err, tc.wantReason)
				}
				if ne.Node != "n1" || ne.Error() == "" {
					t.Errorf("NodeError names node %q, want n1", ne.Node)
				}
				if errors.Is(err, ErrInvalidTopology) {
					t.Error("node error must not be a configuration error")
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil && errors.Is(err, ErrNodeIneligible) {
				t.Error("configuration error must not say the node is ineligible")
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("requirements (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequirementsImmediate(t *testing.T) {
	zones := zonalIndex([]string{"z1", "z2", "z3"}, 1)
	racks := NewIndex(testDriver)
	for _, n := range []struct{ name, zone, rack string }{{"a", "z1", "r1"}, {"b", "z2", "r1"}, {"c", "z2", "r2"}} {
		racks.UpsertNode(makeNode(n.name, map[string]string{zoneKey: n.zone, rackKey: n.rack}))
		racks.UpsertCSINode(makeCSINode(n.name, testDriver, zoneKey, rackKey))
	}
	// In z1 only p1 carries pool=gold, in z3 only p3; z2 has no gold node.
	pools := NewIndex(testDriver)
	for _, e := range events(
		zonalNode("p1", zoneKey, "z1", poolKey, "gold"), zonalNode("p2", zoneKey, "z1", poolKey, "silver"),
		zonalNode("p3", zoneKey, "z3", poolKey, "gold"), zonalNode("p4", zoneKey, "z3"), zonalNode("p5", zoneKey, "z2"),
		[]indexEvent{upsertNode("p6", zoneKey, "z2", poolKey, "gold")}, // no CSINode: does not count
	) {
		e(pools)
	}
	// The driver registered, but without topology keys.
	keyless := NewIndex(testDriver)
	keyless.UpsertNode(makeNode("k", map[string]string{zoneKey: "z1"}))
	keyless.UpsertCSINode(makeCSINode("k", testDriver))
	unknown := []v1.TopologySelectorTerm{term(expr("example.com/unknown", "x"))}
	tests := []struct {
		name      string
		allowed   []v1.TopologySelectorTerm
		immediate bool
		index     *Index
		want      *csi.TopologyRequirement
		// wantAsWritten: the terms were sent as written.
		wantAsWritten bool
		wantErr       error
		// wantMsg lists what the error message must say.
		wantMsg []string
	}{
		{
			name:      "all known segments",
			immediate: true,
			index:     zones,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z2"), seg(zoneKey, "z3")),
				Preferred: csiTopo(seg(zoneKey, "z2"), seg(zoneKey, "z3"), seg(zoneKey, "z1")),
			},
		},
		{name: "immediate topology off", immediate: false, index: zones, want: nil},
		{name: "nothing known", immediate: true, index: NewIndex(testDriver), want: nil},
		{
			name:    "driver key AND a label only some nodes of a zone carry",
			allowed: []v1.TopologySelectorTerm{term(expr(poolKey, "gold"), expr(zoneKey, "z1", "z2"))},
			index:   pools,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1")),
				Preferred: csiTopo(seg(zoneKey, "z1")),
			},
		},
		{
			name:    "terms ORed, each matched as a whole",
			allowed: []v1.TopologySelectorTerm{term(expr(poolKey, "gold"), expr(zoneKey, "z2", "z3")), term(expr(poolKey, "silver"))},
			index:   pools,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z1"), seg(zoneKey, "z3")),
				Preferred: csiTopo(seg(zoneKey, "z3"), seg(zoneKey, "z1")),
			},
		},
		{
			name: "unknown key no node carries: the term as written", allowed: unknown, index: zones, wantAsWritten: true,
			want: &csi.TopologyRequirement{Requisite: csiTopo(seg("example.com/unknown", "x")), Preferred: csiTopo(seg("example.com/unknown", "x"))},
		},
		{
			name:    "allowedTopologies naming only some driver keys select known segments",
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z2"))},
			index:   racks,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z2", rackKey, "r1"), seg(zoneKey, "z2", rackKey, "r2")),
				Preferred: csiTopo(seg(zoneKey, "z2", rackKey, "r2"), seg(zoneKey, "z2", rackKey, "r1")),
			},
		},
		{
			name:    "a combination no node forms is not asked for",
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z1", "z2"), expr(rackKey, "r2"))},
			index:   racks,
			want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z2", rackKey, "r2")),
				Preferred: csiTopo(seg(zoneKey, "z2", rackKey, "r2")),
			},
		},
		{
			name:    "no node in an allowed segment (a node group scaled to zero): the terms as written",
			allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z8", "z9")), term(expr(zoneKey, "z7"), expr(rackKey, "r1"))}, index: racks,
			wantAsWritten: true, want: &csi.TopologyRequirement{
				Requisite: csiTopo(seg(zoneKey, "z7", rackKey, "r1"), seg(zoneKey, "z8"), seg(zoneKey, "z9")),
				Preferred: csiTopo(seg(zoneKey, "z8"), seg(zoneKey, "z9"), seg(zoneKey, "z7", rackKey, "r1")),
			},
		},
		{
			name: "no node reports topology: the terms as written", allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"))},
			index: NewIndex(testDriver), wantAsWritten: true, want: &csi.TopologyRequirement{Requisite: csiTopo(seg(zoneKey, "z1")), Preferred: csiTopo(seg(zoneKey, "z1"))},
		},
		{
			name: "driver without topology keys: the terms as written", allowed: []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"))},
			index: keyless, wantAsWritten: true, want: &csi.TopologyRequirement{Requisite: csiTopo(seg(zoneKey, "z1")), Preferred: csiTopo(seg(zoneKey, "z1"))},
		},
		{
			name: "no index: the terms as written", allowed: unknown, wantAsWritten: true,
			want: &csi.TopologyRequirement{Requisite: csiTopo(seg("example.com/unknown", "x")), Preferred: csiTopo(seg("example.com/unknown", "x"))},
		},
		{
			name: "a term without expressions allows nothing", allowed: []v1.TopologySelectorTerm{term()}, index: zones,
			wantErr: ErrNoAllowedSegment, wantMsg: []string{"allowedTopologies [{}]"},
		},
		{name: "invalid allowedTopologies", allowed: []v1.TopologySelectorTerm{term(expr(zoneKey))}, index: zones, wantErr: ErrInvalidTopology},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			placed, err := Place(RequirementsInput{
				Driver: testDriver, AllowedTopologies: tc.allowed, Immediate: tc.immediate,
				Index: tc.index, ClaimName: "data-web-1",
			})
			got := placed.Requirement
			if placed.TermsAsWritten != tc.wantAsWritten {
				t.Errorf("TermsAsWritten = %t, want %t", placed.TermsAsWritten, tc.wantAsWritten)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			for _, w := range tc.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("requirements (-want +got):\n%s", diff)
			}
		})
	}
}

// StatefulSet replicas start their preferred list on consecutive segments.
func TestRequirementsSpreadStatefulSet(t *testing.T) {
	zones := zonalIndex([]string{"z1", "z2", "z3"}, 1)
	first := map[string]bool{}
	for _, claim := range []string{"data-web-0", "data-web-1", "data-web-2"} {
		req, err := Requirements(RequirementsInput{Driver: testDriver, Immediate: true, Index: zones, ClaimName: claim})
		if err != nil {
			t.Fatal(err)
		}
		first[Segment(req.Preferred[0].Segments).String()] = true
	}
	if len(first) != 3 {
		t.Errorf("replicas prefer %d distinct segments, want 3: %v", len(first), first)
	}
	if spreadOffset("x", 1) != 0 || spreadOffset("db", 7) != spreadOffset("db", 7) {
		t.Error("spreadOffset is not stable")
	}
}
