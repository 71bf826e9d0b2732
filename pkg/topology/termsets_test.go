package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// indexEvent is one Node or CSINode event fed to an Index.
type indexEvent func(*Index)

func upsertNode(name string, kv ...string) indexEvent {
	return func(i *Index) { i.UpsertNode(makeNode(name, nodeLabels(kv...))) }
}

func upsertCSINode(name string, keys ...string) indexEvent {
	return func(i *Index) { i.UpsertCSINode(makeCSINode(name, testDriver, keys...)) }
}

func deleteNode(name string) indexEvent { return func(i *Index) { i.DeleteNode(name) } }

func deleteCSINode(name string) indexEvent { return func(i *Index) { i.DeleteCSINode(name) } }

// zonalNode is a node with a CSINode listing the zone key.
func zonalNode(name string, kv ...string) []indexEvent {
	return []indexEvent{upsertNode(name, kv...), upsertCSINode(name, zoneKey)}
}

func events(groups ...[]indexEvent) []indexEvent {
	var out []indexEvent
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func TestIndexAllowed(t *testing.T) {
	termSets := map[string][]v1.TopologySelectorTerm{
		"gold":    {term(expr(zoneKey, "z1", "z2"), expr(poolKey, "gold"))},
		"silver":  {term(expr(poolKey, "silver"))},
		"unknown": {term(expr("example.com/unknown", "x"))},
	}
	// a (z1, gold), b (z1), c (z2), d (z3, gold).
	base := events(
		zonalNode("a", zoneKey, "z1", poolKey, "gold"),
		zonalNode("b", zoneKey, "z1"),
		zonalNode("c", zoneKey, "z2"),
		zonalNode("d", zoneKey, "z3", poolKey, "gold"),
	)
	z1, z2, z3 := seg(zoneKey, "z1"), seg(zoneKey, "z2"), seg(zoneKey, "z3")
	tests := []struct {
		name string
		// before is fed before the term sets are registered, after once
		// they are.
		before, after []indexEvent
		want          map[string][]Segment
	}{
		{
			name:   "registration counts only nodes satisfying a whole term",
			before: base,
			want:   map[string][]Segment{"gold": {z1}},
		},
		{
			name:  "registered before any node",
			after: base,
			want:  map[string][]Segment{"gold": {z1}},
		},
		{
			name:   "label added to a node of another zone adds its segment",
			before: base,
			after:  []indexEvent{upsertNode("c", zoneKey, "z2", poolKey, "gold")},
			want:   map[string][]Segment{"gold": {z1, z2}},
		},
		{
			name:   "label removed from the only satisfying node removes the segment",
			before: base,
			after:  []indexEvent{upsertNode("a", zoneKey, "z1", poolKey, "silver")},
			want:   map[string][]Segment{"silver": {z1}},
		},
		{
			name:   "label moves between nodes of one zone: the segment stays",
			before: base,
			after:  []indexEvent{upsertNode("b", zoneKey, "z1", poolKey, "gold"), upsertNode("a", zoneKey, "z1")},
			want:   map[string][]Segment{"gold": {z1}},
		},
		{
			name:   "satisfying node deleted, the zone's other node does not satisfy",
			before: base,
			after:  []indexEvent{deleteNode("a")},
			want:   map[string][]Segment{},
		},
		{
			name:   "one of two satisfying nodes deleted",
			before: base,
			after:  []indexEvent{upsertNode("b", zoneKey, "z1", poolKey, "gold"), deleteNode("a")},
			want:   map[string][]Segment{"gold": {z1}},
		},
		{
			name:   "CSINode deleted: the node no longer counts",
			before: base,
			after:  []indexEvent{deleteCSINode("a")},
			want:   map[string][]Segment{},
		},
		{
			name:   "driver unregistered from the node",
			before: base,
			after:  []indexEvent{func(i *Index) { i.UpsertCSINode(&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "a"}}) }},
			want:   map[string][]Segment{},
		},
		{
			name:   "satisfying node moves to another allowed zone",
			before: base,
			after:  []indexEvent{upsertNode("a", zoneKey, "z2", poolKey, "gold")},
			want:   map[string][]Segment{"gold": {z2}},
		},
		{
			name:   "satisfying node moves out of the term's zones",
			before: base,
			after:  []indexEvent{upsertNode("a", zoneKey, "z3", poolKey, "gold")},
			want:   map[string][]Segment{},
		},
		{
			name:   "node with the label but no CSINode does not count",
			before: base,
			after:  []indexEvent{upsertNode("e", zoneKey, "z2", poolKey, "gold")},
			want:   map[string][]Segment{"gold": {z1}},
		},
		{
			name:   "term sets are independent",
			before: base,
			after:  events(zonalNode("e", zoneKey, "z3", poolKey, "silver"), zonalNode("f", zoneKey, "z3", "example.com/unknown", "x")),
			want:   map[string][]Segment{"gold": {z1}, "silver": {z3}, "unknown": {z3}},
		},
		{
			name:   "segments of every key set",
			before: base,
			after: []indexEvent{
				upsertNode("r", zoneKey, "z2", rackKey, "r1", poolKey, "gold"), upsertCSINode("r", zoneKey, rackKey),
			},
			want: map[string][]Segment{"gold": {seg(rackKey, "r1", zoneKey, "z2"), z1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := NewIndex(testDriver)
			for _, e := range tc.before {
				e(idx)
			}
			for _, terms := range termSets {
				idx.allowed(terms, nil)
			}
			for _, e := range tc.after {
				e(idx)
			}
			// A fresh index fed every event, registered last, must agree.
			fresh := NewIndex(testDriver)
			for _, e := range events(tc.before, tc.after) {
				e(fresh)
			}
			for name, terms := range termSets {
				got, _ := idx.allowed(terms, nil)
				if diff := cmp.Diff(tc.want[name], got, cmpSegments); diff != "" {
					t.Errorf("term set %s: allowed segments (-want +got):\n%s", name, diff)
				}
				again, _ := fresh.allowed(terms, nil)
				if diff := cmp.Diff(again, got, cmpSegments); diff != "" {
					t.Errorf("term set %s: incremental counts differ from a fresh registration (-fresh +incremental):\n%s", name, diff)
				}
			}
		})
	}
}

// cmpSegments treats nil and empty segment lists alike.
var cmpSegments = cmp.Transformer("segments", func(s []Segment) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, x.String())
	}
	return out
})

func TestIndexAllowedKeySet(t *testing.T) {
	idx := NewIndex(testDriver)
	for _, e := range events(
		zonalNode("a", zoneKey, "z1", poolKey, "gold"),
		[]indexEvent{upsertNode("r", zoneKey, "z2", rackKey, "r1", poolKey, "gold"), upsertCSINode("r", zoneKey, rackKey)},
	) {
		e(idx)
	}
	gold := []v1.TopologySelectorTerm{term(expr(poolKey, "gold"))}
	tests := []struct {
		name      string
		keys      []string
		want      []Segment
		wantNodes int
	}{
		{name: "zone", keys: []string{zoneKey}, want: []Segment{seg(zoneKey, "z1")}, wantNodes: 2},
		{name: "zone and rack, any order", keys: []string{zoneKey, rackKey}, want: []Segment{seg(zoneKey, "z2", rackKey, "r1")}, wantNodes: 2},
		{name: "key set no node reports", keys: []string{hostKey}, want: nil, wantNodes: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, nodes := idx.allowed(gold, tc.keys)
			if diff := cmp.Diff(tc.want, got, cmpSegments); diff != "" || nodes != tc.wantNodes {
				t.Errorf("allowed = %v, %d nodes; want %v, %d:\n%s", got, nodes, tc.want, tc.wantNodes, diff)
			}
		})
	}
}

// Beyond maxTermSets the least recently used set is dropped; used again, it
// is registered afresh from the current nodes.
func TestIndexTermSetEviction(t *testing.T) {
	idx := NewIndex(testDriver)
	idx.maxTermSets = 2
	for _, e := range zonalNode("a", zoneKey, "z1", poolKey, "gold") {
		e(idx)
	}
	gold := []v1.TopologySelectorTerm{term(expr(poolKey, "gold"))}
	silver := []v1.TopologySelectorTerm{term(expr(poolKey, "silver"))}
	zone := []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"))}
	idx.allowed(gold, nil)
	idx.allowed(silver, nil)
	idx.allowed(gold, nil)
	idx.allowed(zone, nil) // evicts silver, the least recently used
	if _, ok := idx.terms[termsID(silver)]; ok || len(idx.terms) != 2 {
		t.Fatalf("registered term sets %d, silver kept %v; want 2 without silver", len(idx.terms), ok)
	}
	upsertNode("a", zoneKey, "z1", poolKey, "silver")(idx) // while silver is not registered
	got, _ := idx.allowed(silver, nil)
	if diff := cmp.Diff([]Segment{seg(zoneKey, "z1")}, got, cmpSegments); diff != "" {
		t.Errorf("silver after re-registration (-want +got):\n%s", diff)
	}
	if got, _ := idx.allowed(gold, nil); len(got) != 0 {
		t.Errorf("gold still allows %v after a lost its label", got)
	}
}

func TestTermsID(t *testing.T) {
	tests := []struct {
		name string
		a, b []v1.TopologySelectorTerm
		same bool
	}{
		{
			name: "order of values, expressions and terms",
			a:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1", "z2"), expr(poolKey, "gold")), term(expr(rackKey, "r1"))},
			b:    []v1.TopologySelectorTerm{term(expr(rackKey, "r1")), term(expr(poolKey, "gold"), expr(zoneKey, "z2", "z1"))},
			same: true,
		},
		{
			name: "duplicate values and terms",
			a:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1", "z1")), term(expr(zoneKey, "z1"))},
			b:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"))},
			same: true,
		},
		{
			name: "AND is not OR",
			a:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"), expr(poolKey, "gold"))},
			b:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1")), term(expr(poolKey, "gold"))},
		},
		{
			name: "values are not keys",
			a:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1", "z2"))},
			b:    []v1.TopologySelectorTerm{term(expr(zoneKey, "z1,z2"))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := termsID(tc.a) == termsID(tc.b); got != tc.same {
				t.Errorf("termsID equal = %v, want %v", got, tc.same)
			}
		})
	}
}

func TestFormatTerms(t *testing.T) {
	got := formatTerms([]v1.TopologySelectorTerm{
		term(expr(zoneKey, "z1", "z2"), expr(poolKey, "gold")),
		term(expr("example.com/unknown", "x")),
	})
	want := "[{" + zoneKey + " in (z1,z2), example.com/pool in (gold)}, {example.com/unknown in (x)}]"
	if got != want {
		t.Errorf("formatTerms = %q, want %q", got, want)
	}
}
