package topology

import (
	"reflect"
	"testing"
)

func TestCapacityVersionsRoundTrip(t *testing.T) {
	in := map[string]string{"kube-system/csisc-b": "12", "kube-system/csisc-a": "7"}
	s := FormatCapacityVersions(in)
	if s != "kube-system/csisc-a=7,kube-system/csisc-b=12" {
		t.Fatalf("Format = %q", s)
	}
	if got := ParseCapacityVersions(s); !reflect.DeepEqual(got, in) {
		t.Errorf("Parse(Format) = %v, want %v", got, in)
	}
	if got := ParseCapacityVersions("a=1,,=2,b=,c"); !reflect.DeepEqual(got, map[string]string{"a": "1"}) {
		t.Errorf("malformed parts kept: %v", got)
	}
	if got := FormatCapacityVersions(nil); got != "" {
		t.Errorf("Format(nil) = %q", got)
	}
}

func TestVersionReached(t *testing.T) {
	for _, tc := range []struct {
		observed, want string
		reached        bool
	}{
		{"10", "9", true},
		{"10", "10", true},
		{"9", "10", false},
		{"100", "99", true}, // numeric, not lexical
		{"99", "100", false},
		{"x", "10", true},
		{"10", "y", true},
	} {
		if got := VersionReached(tc.observed, tc.want); got != tc.reached {
			t.Errorf("VersionReached(%q, %q) = %v, want %v", tc.observed, tc.want, got, tc.reached)
		}
	}
}
