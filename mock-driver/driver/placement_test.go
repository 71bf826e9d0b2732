package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
)

func seg(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestMatches(t *testing.T) {
	tests := []struct {
		name     string
		segment  map[string]string
		topology map[string]string
		want     bool
	}{
		{name: "same", segment: seg("zone", "z1"), topology: seg("zone", "z1"), want: true},
		{name: "other value", segment: seg("zone", "z1"), topology: seg("zone", "z2"), want: false},
		{name: "segment finer than topology", segment: seg("zone", "z1", "rack", "r1"), topology: seg("zone", "z1"), want: true},
		{name: "topology finer than segment", segment: seg("zone", "z1"), topology: seg("zone", "z1", "rack", "r1"), want: true},
		{name: "finer, other rack", segment: seg("zone", "z1", "rack", "r2"), topology: seg("zone", "z1", "rack", "r1"), want: false},
		{name: "empty topology", segment: seg("zone", "z1"), topology: nil, want: true},
		{name: "empty segment", segment: nil, topology: seg("zone", "z1"), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := matches(tc.segment, tc.topology); got != tc.want {
				t.Errorf("matches(%v, %v) = %v, want %v", tc.segment, tc.topology, got, tc.want)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	// zone × rack: z1/r1 has 1 GiB free, z1/r2 3, z2/r1 2, z2/r2 none.
	var segs []segmentUsage
	for _, s := range []struct {
		zone, rack string
		free       int64
	}{{"z1", "r1", 1}, {"z1", "r2", 3}, {"z2", "r1", 2}, {"z2", "r2", 0}} {
		topology := seg("zone", s.zone, "rack", s.rack)
		segs = append(segs, segmentUsage{topology: topology, key: segmentKey(topology), capacity: 4 * gi, used: (4 - s.free) * gi})
	}
	tops := func(kvs ...map[string]string) []*csi.Topology {
		var out []*csi.Topology
		for _, kv := range kvs {
			out = append(out, &csi.Topology{Segments: kv})
		}
		return out
	}
	tests := []struct {
		name string
		reqs *csi.TopologyRequirement
		want []string
	}{
		{
			name: "no requirements: most free first",
			want: []string{"rack=r2,zone=z1", "rack=r1,zone=z2", "rack=r1,zone=z1", "rack=r2,zone=z2"},
		},
		{
			name: "preferred rack, then the rest of the requisite zone",
			reqs: &csi.TopologyRequirement{
				Requisite: tops(seg("zone", "z1")),
				Preferred: tops(seg("zone", "z1", "rack", "r1")),
			},
			want: []string{"rack=r1,zone=z1", "rack=r2,zone=z1"},
		},
		{
			name: "preferred outside the requisite is ignored",
			reqs: &csi.TopologyRequirement{
				Requisite: tops(seg("zone", "z2")),
				Preferred: tops(seg("zone", "z1"), seg("zone", "z2", "rack", "r2")),
			},
			want: []string{"rack=r2,zone=z2", "rack=r1,zone=z2"},
		},
		{
			name: "preferred only: preferred, then every other segment most free first",
			reqs: &csi.TopologyRequirement{Preferred: tops(seg("zone", "z2", "rack", "r2"))},
			want: []string{"rack=r2,zone=z2", "rack=r2,zone=z1", "rack=r1,zone=z2", "rack=r1,zone=z1"},
		},
		{
			name: "requisite order",
			reqs: &csi.TopologyRequirement{Requisite: tops(seg("zone", "z2"), seg("zone", "z1", "rack", "r1"))},
			want: []string{"rack=r1,zone=z2", "rack=r2,zone=z2", "rack=r1,zone=z1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range candidates(segs, tc.reqs, DefaultMaxVolumeBytes) {
				got = append(got, s.key)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}
