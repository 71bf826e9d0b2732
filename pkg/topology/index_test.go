package topology

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
)

func TestIndex(t *testing.T) {
	idx := NewIndex(testDriver)
	idx.UpsertNode(makeNode("a", map[string]string{zoneKey: "z1"}))
	if got := idx.Segments([]string{zoneKey}); got != nil {
		t.Fatalf("node without CSINode contributes %v", got)
	}
	idx.UpsertCSINode(makeCSINode("a", testDriver, zoneKey))
	idx.UpsertCSINode(makeCSINode("b", testDriver, zoneKey))
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z1"}))
	idx.UpsertNode(makeNode("c", map[string]string{zoneKey: "z2"}))
	idx.UpsertCSINode(makeCSINode("c", testDriver, zoneKey))
	idx.UpsertNode(makeNode("d", map[string]string{}))
	idx.UpsertCSINode(makeCSINode("d", testDriver, zoneKey))
	idx.UpsertNode(makeNode("e", map[string]string{zoneKey: "z5"}))
	idx.UpsertCSINode(makeCSINode("e", "other.example.com", zoneKey))

	check := func(step string, want []Segment) {
		t.Helper()
		if diff := cmp.Diff(want, idx.Segments([]string{zoneKey})); diff != "" {
			t.Errorf("%s: segments (-want +got):\n%s", step, diff)
		}
	}
	check("initial", []Segment{seg(zoneKey, "z1"), seg(zoneKey, "z2")})

	// Reference counting: z1 stays while b is still there.
	idx.DeleteNode("a")
	check("one of two z1 nodes deleted", []Segment{seg(zoneKey, "z1"), seg(zoneKey, "z2")})
	// A label change moves a node between segments.
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z3"}))
	check("b moved to z3", []Segment{seg(zoneKey, "z2"), seg(zoneKey, "z3")})
	// An update that changes nothing keeps the segment.
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z3", "unrelated": "x"}))
	check("no-op update", []Segment{seg(zoneKey, "z2"), seg(zoneKey, "z3")})
	// Driver unregistered from c.
	idx.UpsertCSINode(&storagev1.CSINode{ObjectMeta: makeNode("c", nil).ObjectMeta})
	check("driver gone from c", []Segment{seg(zoneKey, "z3")})
	// A node whose keys change moves to another key set.
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z3", rackKey: "r1"}))
	idx.UpsertCSINode(makeCSINode("b", testDriver, zoneKey, rackKey))
	check("b now reports zone and rack", nil)
	if diff := cmp.Diff([]Segment{seg(zoneKey, "z3", rackKey, "r1")}, idx.Segments([]string{zoneKey, rackKey})); diff != "" {
		t.Errorf("zone+rack segments (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{rackKey, zoneKey}}, idx.KeySets()); diff != "" {
		t.Errorf("key sets (-want +got):\n%s", diff)
	}
	idx.DeleteCSINode("b")
	if len(idx.KeySets()) != 0 || len(idx.allSegments()) != 0 {
		t.Errorf("index not empty after last CSINode deleted: %v", idx.KeySets())
	}
}

func TestDriverKeys(t *testing.T) {
	keys, err := DriverKeys(makeCSINode("n", testDriver, zoneKey, rackKey), testDriver)
	if err != nil || cmp.Diff([]string{rackKey, zoneKey}, keys) != "" {
		t.Errorf("DriverKeys = %v, %v", keys, err)
	}
	if _, err := DriverKeys(nil, testDriver); !errors.Is(err, ErrNodeIneligible) {
		t.Errorf("nil CSINode: error = %v", err)
	}
	if _, err := DriverKeys(makeCSINode("n", "other", zoneKey), testDriver); !errors.Is(err, ErrNodeIneligible) {
		t.Errorf("other driver: error = %v", err)
	}
}

func TestIndexOnNewSegment(t *testing.T) {
	idx := NewIndex(testDriver)
	var got []string
	idx.OnNewSegment(func(s Segment) {
		// Called outside the lock: reading the index must not deadlock.
		_ = idx.Segments([]string{zoneKey})
		got = append(got, s.String())
	})
	idx.UpsertNode(makeNode("a", map[string]string{zoneKey: "z1"}))
	idx.UpsertCSINode(makeCSINode("a", testDriver, zoneKey)) // z1 appears
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z1"}))
	idx.UpsertCSINode(makeCSINode("b", testDriver, zoneKey)) // z1 again: no call
	idx.UpsertCSINode(makeCSINode("c", testDriver, zoneKey))
	idx.UpsertNode(makeNode("c", map[string]string{zoneKey: "z2"})) // z2 appears
	idx.UpsertNode(makeNode("b", map[string]string{zoneKey: "z3"})) // z3 appears
	idx.DeleteNode("a")
	idx.DeleteNode("b")                                             // z1 and z3 go
	idx.UpsertNode(makeNode("a", map[string]string{zoneKey: "z1"})) // z1 back
	want := []string{zoneKey + "=z1", zoneKey + "=z2", zoneKey + "=z3", zoneKey + "=z1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("new segments (-want +got):\n%s", diff)
	}
}
