package scheduler

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkLedger measures the reservation ledger with node-local segments
// (one segment per node, so as many buckets as nodes) and reservations in
// flight on every node: one Reserve and Release of a claim, and the two
// reads of a Filter for one node (Reserved of its bucket, InFlight of the
// node). Each costs the same at 50 and at 5 000 nodes.
func BenchmarkLedger(b *testing.B) {
	for _, nodes := range []int{50, 5000} {
		const perNode = 4
		l := NewLedger(time.Hour, time.Now)
		for n := range nodes {
			name := fmt.Sprintf("node-%d", n)
			for i := range perNode {
				id := fmt.Sprintf("%d-%d", n, i)
				l.Reserve(Request{UID: types.UID("uid-" + id), Claim: "ns/c-" + id, Pod: "ns/p-" + id, Node: name,
					Segment: nodeKey + "=" + name, Class: "fast", Bytes: gi})
			}
		}
		target := fmt.Sprintf("node-%d", nodes/2)
		seg := nodeKey + "=" + target
		b.Run(fmt.Sprintf("ReserveRelease/%dNodes", nodes), func(b *testing.B) {
			for b.Loop() {
				l.Reserve(Request{UID: "uid-new", Claim: "ns/new", Pod: "ns/p-new", Node: target, Segment: seg, Class: "fast", Bytes: gi})
				l.Release("uid-new")
			}
		})
		b.Run(fmt.Sprintf("FilterReads/%dNodes", nodes), func(b *testing.B) {
			own := []types.UID{"uid-new"}
			for b.Loop() {
				if l.Reserved(seg, "fast", own) != perNode*gi {
					b.Fatal("wrong reserved sum")
				}
				if l.InFlight(target, own, nil, nil) != perNode {
					b.Fatal("wrong in-flight count")
				}
			}
		})
	}
}
