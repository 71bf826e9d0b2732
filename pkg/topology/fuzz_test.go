package topology

import (
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

func FuzzRequirements(f *testing.F) {
	f.Add("z2", "", "zone=z1,z2", false, "data-web-3")
	f.Add("z1", "r1", "zone=z1;rack=r1,r2|zone=z2;rack=r1", true, "claim")
	f.Add("z3", "", "", false, "x-0")
	f.Add("", "r9", "zone=z3", false, "")
	f.Fuzz(func(t *testing.T, zone, rack, allowed string, strict bool, claim string) {
		idx := zonalIndex([]string{"z1", "z2", "z3"}, 1)
		labels := map[string]string{}
		keys := []string{zoneKey}
		if zone != "" {
			labels[zoneKey] = zone
		}
		if rack != "" {
			labels[rackKey] = rack
			keys = append(keys, rackKey)
		}
		var terms []v1.TopologySelectorTerm
		if allowed != "" {
			terms = termsFromSpec(strings.NewReplacer("zone", zoneKey, "rack", rackKey).Replace(allowed))
		}
		in := RequirementsInput{
			Driver: testDriver, SelectedNode: makeNode("n", labels), SelectedNodeName: "n",
			CSINode: makeCSINode("n", testDriver, keys...), AllowedTopologies: terms,
			Strict: strict, Index: idx, ClaimName: claim,
		}
		req, err := Requirements(in)
		if err != nil {
			return
		}
		again, _ := Requirements(in)
		if diff := cmp.Diff(req, again, protocmp.Transform()); diff != "" {
			t.Fatalf("Requirements is not deterministic:\n%s", diff)
		}
		if req == nil {
			t.Fatal("delayed binding with topology keys gave no requirements")
		}
		own, _ := segmentFromLabels(labels, keys)
		if !Segment(req.Preferred[0].Segments).Equal(own) {
			t.Fatalf("preferred[0] = %v, want the node's segment %s", req.Preferred[0].Segments, own)
		}
		requisite := map[string]bool{}
		for _, r := range req.Requisite {
			requisite[Segment(r.Segments).String()] = true
			if !allowsSegment(terms, Segment(r.Segments)) {
				t.Fatalf("requisite %v outside allowedTopologies", r.Segments)
			}
		}
		if len(req.Preferred) != len(req.Requisite) {
			t.Fatalf("preferred has %d entries, requisite %d", len(req.Preferred), len(req.Requisite))
		}
		for _, p := range req.Preferred {
			if !requisite[Segment(p.Segments).String()] {
				t.Fatalf("preferred %v not in requisite", p.Segments)
			}
		}
		if strict && len(req.Requisite) != 1 {
			t.Fatalf("strict requirements have %d requisite segments", len(req.Requisite))
		}
	})
}
