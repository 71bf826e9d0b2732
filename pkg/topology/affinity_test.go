package topology

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestNodeAffinity(t *testing.T) {
	in := func(key, value string) v1.NodeSelectorRequirement {
		return v1.NodeSelectorRequirement{Key: key, Operator: v1.NodeSelectorOpIn, Values: []string{value}}
	}
	tests := []struct {
		name string
		topo []*csi.Topology
		want *v1.VolumeNodeAffinity
	}{
		{name: "nil", topo: nil, want: nil},
		{name: "empty segments", topo: []*csi.Topology{{}}, want: nil},
		{
			name: "zonal",
			topo: csiTopo(seg(zoneKey, "z1")),
			want: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{
				{MatchExpressions: []v1.NodeSelectorRequirement{in(zoneKey, "z1")}},
			}}},
		},
		{
			name: "multi-zonal, multi-label, sorted and de-duplicated",
			topo: csiTopo(seg(zoneKey, "z2", rackKey, "r1"), seg(zoneKey, "z1", rackKey, "r2"), seg(rackKey, "r1", zoneKey, "z2")),
			want: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{
				{MatchExpressions: []v1.NodeSelectorRequirement{in(rackKey, "r1"), in(zoneKey, "z2")}},
				{MatchExpressions: []v1.NodeSelectorRequirement{in(rackKey, "r2"), in(zoneKey, "z1")}},
			}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, NodeAffinity(tc.topo)); diff != "" {
				t.Errorf("NodeAffinity (-want +got):\n%s", diff)
			}
		})
	}
}
