package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// A pod's signature names each of its claims of the driver with what
// Filter and Score read of it, including where a clone's source is
// reachable from; pods sharing their claims sign alike.
func TestSignature(t *testing.T) {
	w, c := sourceWorld(t, true)
	w.add(t, w.claims, cloneOf("clone", "src", true), cloneOf("clone-free", "src-free", true), claim("plain", "fast", 2*gi))
	sig := func(claims ...string) []string {
		t.Helper()
		podVols, err := c.PodVolumes(pod("p", claims...))
		if err != nil {
			t.Fatal(err)
		}
		return podVols.Signature()
	}
	got := sig("plain", "clone", "src")
	if len(got) != 3 || !slices.IsSorted(got) {
		t.Fatalf("Signature = %q, want three sorted entries", got)
	}
	for _, want := range []string{"bound pv-src", "pending ns/plain uid=uid-plain class=fast bytes=2147483648", zoneKey + " in (z1)"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("Signature = %q, lacks %q", got, want)
		}
	}
	if again := sig("src", "clone", "plain"); !slices.Equal(again, got) {
		t.Errorf("same claims in another order: %q, want %q", again, got)
	}
	if other := sig("clone-free"); len(other) != 1 || strings.Contains(other[0], "reachable") {
		t.Errorf("clone of an unconstrained source: %q", other)
	}
	var none *PodVolumes
	if none.Signature() != nil {
		t.Error("nil PodVolumes has a signature")
	}
}
