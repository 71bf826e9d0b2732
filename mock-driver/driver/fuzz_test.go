package driver

import (
	"strings"
	"testing"
)

// FuzzParseSegmentTable feeds arbitrary segment tables (--segments-file):
// no panic; an accepted table has segments, every key normalized.
func FuzzParseSegmentTable(f *testing.F) {
	for _, s := range []string{
		`{"segments":[{"topology":{"zone":"z1"},"capacityBytes":10737418240},{"topology":{"zone":"z2"}}],"nodeLimits":{"node-1":2}}`,
		`{"segments":[]}`, `{}`, `{"segments":[{"topology":{"a/b":"c"},"capacityBytes":-5}]}`, `{"segments":[{"bogus":1}]}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		table, err := ParseSegmentTable(data)
		if err != nil {
			return
		}
		if len(table.Segments) == 0 {
			t.Fatalf("accepted a table without segments: %s", data)
		}
		for _, s := range table.Segments {
			for k := range s.Topology {
				if NormalizeKey(k) != k {
					t.Fatalf("key %q not normalized in %s", k, data)
				}
			}
		}
	})
}

// FuzzParseSegment checks --node-topology strings: no panic, and an accepted
// segment printed back as key=value pairs parses to itself.
func FuzzParseSegment(f *testing.F) {
	for _, s := range []string{"zone=z1,rack=r1", "", " ", "zone=", "=z1", "zone=z1,zone=z2", "a/b=c", "zone=z1=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seg, err := ParseSegment(s)
		if err != nil {
			return
		}
		var parts []string
		for k, v := range seg {
			parts = append(parts, k+"="+v)
		}
		again, err := ParseSegment(strings.Join(parts, ","))
		if err != nil {
			t.Fatalf("%q parsed to %v, which does not parse back: %v", s, seg, err)
		}
		if len(again) != len(seg) {
			t.Fatalf("%q parsed to %v, printed back it is %v", s, seg, again)
		}
		for k, v := range seg {
			if again[k] != v {
				t.Fatalf("%q parsed to %v, printed back it is %v", s, seg, again)
			}
		}
	})
}
