package topology

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
)

// termsFromSpec decodes a compact fuzz input: terms separated by '|',
// expressions by ';', "key=v1,v2" per expression.
func termsFromSpec(spec string) []v1.TopologySelectorTerm {
	var terms []v1.TopologySelectorTerm
	for _, ts := range strings.Split(spec, "|") {
		var t v1.TopologySelectorTerm
		for _, es := range strings.Split(ts, ";") {
			if es == "" {
				continue
			}
			key, vals, _ := strings.Cut(es, "=")
			var values []string
			if vals != "" {
				values = strings.Split(vals, ",")
			}
			t.MatchLabelExpressions = append(t.MatchLabelExpressions, expr(key, values...))
		}
		terms = append(terms, t)
	}
	return terms
}

func FuzzFlatten(f *testing.F) {
	for _, s := range []string{
		"zone=z1,z2",
		"zone=z1;rack=r1,r2|zone=z2;rack=r1",
		"host=node1",
		"zone=|rack=r1",
		"zone=a;zone=b",
		"=x",
		"a=1,2,3;b=1,2;c=x|a=1;b=2;c=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		terms := termsFromSpec(spec)
		if len(terms) > 8 {
			return
		}
		got, err := Flatten(terms)
		if err != nil {
			return
		}
		again, _ := Flatten(terms)
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("Flatten is not deterministic:\n%s", diff)
		}
		for i, s := range got {
			if !MatchLabels(terms, s) {
				t.Fatalf("flattened segment %s does not match its own terms", s)
			}
			if i > 0 && got[i-1].String() >= s.String() {
				t.Fatalf("segments not sorted and unique: %s then %s", got[i-1], s)
			}
		}
	})
}

// fuzzNode is a generated node: its labels and the driver's topology keys
// in its CSINode (nil: no CSINode).
type fuzzNode struct {
	labels map[string]string
	keys   []string
}

// parseFuzzNode decodes one node of FuzzRequirements' nodes input: nodes are
// separated by '|', each "zone/rack/pool/keys" where an empty field is an
// absent label and keys is "zr" (zone and rack), "-" (no CSINode) or
// anything else (zone). A node written "before>after" is fed as before, and
// as after once the first check registered the class ("-" deletes it). false
// means "-": no such node.
func parseFuzzNode(spec string) (fuzzNode, bool) {
	if spec == "-" {
		return fuzzNode{}, false
	}
	f := strings.SplitN(spec, "/", 4)
	for len(f) < 4 {
		f = append(f, "")
	}
	n := fuzzNode{labels: map[string]string{}}
	for i, k := range []string{zoneKey, rackKey, poolKey} {
		if f[i] != "" {
			n.labels[k] = f[i]
		}
	}
	switch f[3] {
	case "-":
	case "zr":
		n.keys = []string{rackKey, zoneKey}
	default:
		n.keys = []string{zoneKey}
	}
	return n, true
}

func feedFuzzNode(idx *Index, name string, n fuzzNode, exists bool) {
	if !exists {
		idx.DeleteNode(name)
		idx.DeleteCSINode(name)
		return
	}
	idx.UpsertNode(makeNode(name, n.labels))
	if n.keys == nil {
		idx.DeleteCSINode(name)
	} else {
		idx.UpsertCSINode(makeCSINode(name, testDriver, n.keys...))
	}
}

// reachable returns the segments (by String) with keys (any when nil) of
// the nodes of model that count for the driver and satisfy terms: the brute
// force the index must agree with.
func reachable(model map[string]fuzzNode, terms []v1.TopologySelectorTerm, keys []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range model {
		if len(n.keys) == 0 || !MatchLabels(terms, n.labels) || (keys != nil && keySetID(n.keys) != keySetID(keys)) {
			continue
		}
		if s, missing := segmentFromLabels(n.labels, n.keys); missing == "" {
			out[s.String()] = true
		}
	}
	return out
}

func FuzzRequirements(f *testing.F) {
	f.Add("z2", "", "", "zone=z1,z2", false, false, "data-web-3", "")
	f.Add("z1", "r1", "", "zone=z1;rack=r1,r2|zone=z2;rack=r1", true, false, "claim", "")
	f.Add("z3", "", "", "", false, false, "x-0", "")
	f.Add("", "r9", "", "zone=z3", false, false, "", "")
	f.Add("z2", "", "gold", "zone=z1,z2;pool=gold", false, false, "c", "z1//gold>z1/|z2//gold/-|z4//gold|z1/r1/gold/zr>z2/r1/gold/zr")
	f.Add("", "", "", "unknown=x", false, true, "c", "z1//gold|z2")
	f.Add("", "", "", "zone=z1,z2;pool=gold|rack=r2", false, true, "data-1", "z1//gold>z1|z2/r2//zr|z2//gold>-|z3/r2/gold/zr")
	f.Fuzz(func(t *testing.T, zone, rack, pool, allowed string, strict, immediate bool, claim, nodes string) {
		idx := zonalIndex([]string{"z1", "z2", "z3"}, 1)
		model := map[string]fuzzNode{}
		for _, n := range zonalIndexNodes([]string{"z1", "z2", "z3"}, 1) {
			model[n] = fuzzNode{labels: map[string]string{zoneKey: n[2:4]}, keys: []string{zoneKey}}
		}
		var terms []v1.TopologySelectorTerm
		if allowed != "" {
			terms = termsFromSpec(strings.NewReplacer("zone", zoneKey, "rack", rackKey, "pool", poolKey).Replace(allowed))
		}
		specs := strings.Split(nodes, "|")
		if nodes == "" || len(specs) > 16 {
			specs = nil
		}
		type change struct {
			name   string
			n      fuzzNode
			exists bool
		}
		var later []change
		for i, spec := range specs {
			name := "f" + itoa(i)
			before, after, moves := strings.Cut(spec, ">")
			n, ok := parseFuzzNode(before)
			feedFuzzNode(idx, name, n, ok)
			if ok {
				model[name] = n
			}
			if moves {
				n, ok := parseFuzzNode(after)
				later = append(later, change{name, n, ok})
			}
		}
		in := fuzzInput(zone, rack, pool, terms, strict, immediate, claim, idx)
		checkRequirements(t, "before the changes", in, model)
		// The term set is registered now: the changes must keep it current.
		for _, c := range later {
			feedFuzzNode(idx, c.name, c.n, c.exists)
			delete(model, c.name)
			if c.exists {
				model[c.name] = c.n
			}
		}
		checkRequirements(t, "after the changes", in, model)
	})
}

// zonalIndexNodes returns the node names zonalIndex makes.
func zonalIndexNodes(zones []string, perZone int) []string {
	var out []string
	for _, z := range zones {
		for i := 0; i < perZone; i++ {
			out = append(out, "n-"+z+"-"+string(rune('a'+i%26))+itoa(i))
		}
	}
	return out
}

func fuzzInput(zone, rack, pool string, terms []v1.TopologySelectorTerm, strict, immediate bool, claim string, idx *Index) RequirementsInput {
	in := RequirementsInput{Driver: testDriver, AllowedTopologies: terms, Strict: strict, Index: idx, ClaimName: claim, Immediate: true}
	if immediate {
		return in
	}
	labels := map[string]string{}
	keys := []string{zoneKey}
	if zone != "" {
		labels[zoneKey] = zone
	}
	if rack != "" {
		labels[rackKey] = rack
		keys = []string{rackKey, zoneKey}
	}
	if pool != "" {
		labels[poolKey] = pool
	}
	in.SelectedNode, in.SelectedNodeName, in.CSINode = makeNode("n", labels), "n", makeCSINode("n", testDriver, keys...)
	return in
}

// checkRequirements checks the properties of Requirements(in) for the nodes
// of model: deterministic; preferred a permutation of requisite; with
// allowedTopologies, requisite is exactly the segments some node satisfying
// them forms (delayed: with the node's keys, plus the node's own segment);
// delayed, preferred[0] is the node's segment.
func checkRequirements(t *testing.T, step string, in RequirementsInput, model map[string]fuzzNode) {
	t.Helper()
	req, err := Requirements(in)
	if err != nil {
		if in.SelectedNodeName == "" && len(in.AllowedTopologies) > 0 && errors.Is(err, ErrNoAllowedSegment) {
			if want := reachable(model, in.AllowedTopologies, nil); len(want) > 0 {
				t.Fatalf("%s: %v, but nodes satisfying allowedTopologies form %v", step, err, want)
			}
		}
		return
	}
	again, _ := Requirements(in)
	if diff := cmp.Diff(req, again, protocmp.Transform()); diff != "" {
		t.Fatalf("%s: Requirements is not deterministic:\n%s", step, diff)
	}
	if req == nil {
		if in.SelectedNodeName != "" || len(in.AllowedTopologies) > 0 {
			t.Fatalf("%s: no requirements for a selected node or a class with allowedTopologies", step)
		}
		return
	}
	got := map[string]bool{}
	for _, r := range req.Requisite {
		got[Segment(r.Segments).String()] = true
	}
	if len(req.Preferred) != len(req.Requisite) || len(got) != len(req.Requisite) {
		t.Fatalf("%s: preferred has %d entries, requisite %d (%d distinct)", step, len(req.Preferred), len(req.Requisite), len(got))
	}
	for _, p := range req.Preferred {
		if !got[Segment(p.Segments).String()] {
			t.Fatalf("%s: preferred %v not in requisite", step, p.Segments)
		}
	}
	if in.SelectedNodeName == "" {
		if len(in.AllowedTopologies) > 0 {
			want := reachable(model, in.AllowedTopologies, nil)
			if len(want) == 0 {
				// No node in an allowed segment: the terms as written.
				written, _ := Flatten(in.AllowedTopologies)
				for _, s := range written {
					want[s.String()] = true
				}
			}
			if cmp.Diff(want, got) != "" {
				t.Fatalf("%s: requisite %v, want the segments of nodes satisfying allowedTopologies (else the terms as written) %v", step, got, want)
			}
		}
		return
	}
	keys, _ := DriverKeys(in.CSINode, in.Driver)
	own, _ := segmentFromLabels(in.SelectedNode.Labels, keys)
	if !Segment(req.Preferred[0].Segments).Equal(own) {
		t.Fatalf("%s: preferred[0] = %v, want the node's segment %s", step, req.Preferred[0].Segments, own)
	}
	if in.Strict {
		if len(req.Requisite) != 1 {
			t.Fatalf("%s: strict requirements have %d requisite segments", step, len(req.Requisite))
		}
		return
	}
	want := reachable(model, in.AllowedTopologies, keys)
	want[own.String()] = true
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: requisite (-want +got):\n%s", step, diff)
	}
}
