package topology

import (
	"fmt"
	"testing"
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
