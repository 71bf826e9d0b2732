package topology

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestFlatten(t *testing.T) {
	tests := []struct {
		name    string
		terms   []v1.TopologySelectorTerm
		want    []Segment
		wantErr error
	}{
		{name: "nil", terms: nil, want: nil},
		{
			// Seed example: local volume limited to one node.
			name:  "local",
			terms: []v1.TopologySelectorTerm{term(expr(hostKey, "node1"))},
			want:  []Segment{seg(hostKey, "node1")},
		},
		{
			name:  "zonal",
			terms: []v1.TopologySelectorTerm{term(expr(zoneKey, "z1"))},
			want:  []Segment{seg(zoneKey, "z1")},
		},
		{
			// Seed example: values of one expression are ORed.
			name:  "multi-zonal",
			terms: []v1.TopologySelectorTerm{term(expr(zoneKey, "z2", "z1"))},
			want:  []Segment{seg(zoneKey, "z1"), seg(zoneKey, "z2")},
		},
		{
			// Seed example: zone x rack, exactly three combinations.
			name: "multi-label zone x rack",
			terms: []v1.TopologySelectorTerm{
				term(expr(zoneKey, "z1"), expr(rackKey, "r1", "r2")),
				term(expr(zoneKey, "z2"), expr(rackKey, "r1")),
			},
			want: []Segment{
				seg(rackKey, "r1", zoneKey, "z1"),
				seg(rackKey, "r1", zoneKey, "z2"),
				seg(rackKey, "r2", zoneKey, "z1"),
			},
		},
		{
			name: "duplicate combinations are removed",
			terms: []v1.TopologySelectorTerm{
				term(expr(zoneKey, "z1", "z1")),
				term(expr(zoneKey, "z1")),
			},
			want: []Segment{seg(zoneKey, "z1")},
		},
		{name: "empty term", terms: []v1.TopologySelectorTerm{term()}, want: nil},
		{name: "no values", terms: []v1.TopologySelectorTerm{term(expr(zoneKey))}, wantErr: ErrInvalidTopology},
		{name: "empty key", terms: []v1.TopologySelectorTerm{term(expr("", "a"))}, wantErr: ErrInvalidTopology},
		{name: "key twice", terms: []v1.TopologySelectorTerm{term(expr(zoneKey, "a"), expr(zoneKey, "b"))}, wantErr: ErrInvalidTopology},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Flatten(tc.terms)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Flatten (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatchLabels(t *testing.T) {
	zoneRack := []v1.TopologySelectorTerm{
		term(expr(zoneKey, "z1"), expr(rackKey, "r1", "r2")),
		term(expr(zoneKey, "z2"), expr(rackKey, "r1")),
	}
	tests := []struct {
		name   string
		terms  []v1.TopologySelectorTerm
		labels map[string]string
		want   bool
	}{
		{name: "no terms match everything", labels: map[string]string{}, want: true},
		{name: "first term", terms: zoneRack, labels: map[string]string{zoneKey: "z1", rackKey: "r2"}, want: true},
		{name: "second term", terms: zoneRack, labels: map[string]string{zoneKey: "z2", rackKey: "r1"}, want: true},
		{name: "combination not allowed", terms: zoneRack, labels: map[string]string{zoneKey: "z2", rackKey: "r2"}, want: false},
		{name: "label missing", terms: zoneRack, labels: map[string]string{zoneKey: "z1"}, want: false},
		{
			name:   "non-driver label is matched against node labels",
			terms:  []v1.TopologySelectorTerm{term(expr("example.com/pool", "gold"), expr(zoneKey, "z1"))},
			labels: map[string]string{zoneKey: "z1", "example.com/pool": "gold"},
			want:   true,
		},
		{name: "empty term matches nothing, as in kube-scheduler", terms: []v1.TopologySelectorTerm{term()}, labels: map[string]string{zoneKey: "z1"}, want: false},
		{
			name:   "empty term ORed with a matching term",
			terms:  []v1.TopologySelectorTerm{term(), term(expr(zoneKey, "z1"))},
			labels: map[string]string{zoneKey: "z1"},
			want:   true,
		},
		{
			name:   "non-driver label mismatch",
			terms:  []v1.TopologySelectorTerm{term(expr("example.com/pool", "gold"))},
			labels: map[string]string{zoneKey: "z1", "example.com/pool": "silver"},
			want:   false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MatchLabels(tc.terms, tc.labels); got != tc.want {
				t.Errorf("MatchLabels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSegmentString(t *testing.T) {
	s := seg(zoneKey, "z1", rackKey, "r1")
	want := rackKey + "=r1," + zoneKey + "=z1"
	if got := s.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if !s.Equal(seg(rackKey, "r1", zoneKey, "z1")) || s.Equal(seg(zoneKey, "z1")) || s.Equal(seg(zoneKey, "z1", rackKey, "r2")) {
		t.Error("Equal gave a wrong answer")
	}
}
