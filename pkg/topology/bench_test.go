package topology

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// benchmarkRequirements measures one delayed-binding claim's requirements on
// a cluster of nodes spread over 10 zones; its cost must not depend on nodes.
func benchmarkRequirements(b *testing.B, nodes int) {
	idx := NewIndex(testDriver)
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		idx.UpsertNode(makeNode(name, map[string]string{zoneKey: fmt.Sprintf("zone-%d", i%10)}))
		idx.UpsertCSINode(makeCSINode(name, testDriver, zoneKey))
	}
	in := RequirementsInput{
		Driver:           testDriver,
		SelectedNode:     makeNode("node-3", map[string]string{zoneKey: "zone-3"}),
		SelectedNodeName: "node-3",
		CSINode:          makeCSINode("node-3", testDriver, zoneKey),
		Index:            idx,
		ClaimName:        "data-web-3",
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Requirements(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequirements10Nodes(b *testing.B)    { benchmarkRequirements(b, 10) }
func BenchmarkRequirements10000Nodes(b *testing.B) { benchmarkRequirements(b, 10000) }

// BenchmarkIndexNodeUpdate measures one Node update event that moves a node
// between segments in a 10 000-node index.
func BenchmarkIndexNodeUpdate(b *testing.B) {
	idx := zonalIndex([]string{"z0", "z1", "z2", "z3", "z4", "z5", "z6", "z7", "z8", "z9"}, 1000)
	a := makeNode("moving", map[string]string{zoneKey: "z1"})
	c := makeNode("moving", map[string]string{zoneKey: "z2"})
	idx.UpsertCSINode(makeCSINode("moving", testDriver, zoneKey))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			idx.UpsertNode(a)
		} else {
			idx.UpsertNode(c)
		}
		i++
	}
}

// goldIndex returns an index of nodes spread over 10 zones, the first node
// of each zone and then every other ten labelled pool=gold (not a driver
// key), and the class terms "zone in zone-0..zone-4 AND pool=gold",
// registered.
func goldIndex(b *testing.B, nodes int) (*Index, []v1.TopologySelectorTerm) {
	idx := NewIndex(testDriver)
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		labels := map[string]string{zoneKey: fmt.Sprintf("zone-%d", i%10)}
		if (i/10)%2 == 0 {
			labels[poolKey] = "gold"
		}
		idx.UpsertNode(makeNode(name, labels))
		idx.UpsertCSINode(makeCSINode(name, testDriver, zoneKey))
	}
	terms := []v1.TopologySelectorTerm{term(expr(zoneKey, "zone-0", "zone-1", "zone-2", "zone-3", "zone-4"), expr(poolKey, "gold"))}
	if segs, _ := idx.allowed(terms, nil); len(segs) != 5 {
		b.Fatalf("allowed segments %v, want 5", segs)
	}
	return idx, terms
}

// benchmarkImmediateAllowed measures one immediate-binding claim whose class
// ANDs zones with a label that is not a driver key; its cost must not depend
// on nodes.
func benchmarkImmediateAllowed(b *testing.B, nodes int) {
	idx, terms := goldIndex(b, nodes)
	in := RequirementsInput{Driver: testDriver, AllowedTopologies: terms, Index: idx, ClaimName: "data-web-3"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Requirements(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkImmediateAllowed10Nodes(b *testing.B)    { benchmarkImmediateAllowed(b, 10) }
func BenchmarkImmediateAllowed10000Nodes(b *testing.B) { benchmarkImmediateAllowed(b, 10000) }

// benchmarkNodeUpdateTermSet measures one Node update event, with a
// registered term set, that alternately moves a node into a segment with the
// class's label and out of it with another segment and without the label.
func benchmarkNodeUpdateTermSet(b *testing.B, nodes int) {
	idx, _ := goldIndex(b, nodes)
	in := makeNode("moving", map[string]string{zoneKey: "zone-1", poolKey: "gold"})
	out := makeNode("moving", map[string]string{zoneKey: "zone-2"})
	idx.UpsertCSINode(makeCSINode("moving", testDriver, zoneKey))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			idx.UpsertNode(in)
		} else {
			idx.UpsertNode(out)
		}
		i++
	}
}

func BenchmarkNodeUpdateTermSet10Nodes(b *testing.B)    { benchmarkNodeUpdateTermSet(b, 10) }
func BenchmarkNodeUpdateTermSet10000Nodes(b *testing.B) { benchmarkNodeUpdateTermSet(b, 10000) }
