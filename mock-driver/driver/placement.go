package driver

import (
	"fmt"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// segmentUsage is a segment with its capacity and the bytes in use.
type segmentUsage struct {
	topology map[string]string
	key      string
	capacity int64 // negative: unlimited
	used     int64
}

// free returns the bytes a new volume may take; an unlimited segment offers
// the largest volume.
func (s segmentUsage) free(maxVolume int64) int64 {
	if s.capacity < 0 {
		return maxVolume
	}
	return max(s.capacity-s.used, 0)
}

// usage returns every segment with its usage, in segment-key order. Call it
// with the store locked (vols is the store's map).
func (d *Driver) usage(vols map[string]*state.Volume) []segmentUsage {
	d.mu.Lock()
	overrides := make(map[string]int64, len(d.capacity))
	for k, v := range d.capacity {
		overrides[k] = v
	}
	d.mu.Unlock()
	out := make([]segmentUsage, 0, len(d.cfg.Segments))
	index := make(map[string]int, len(d.cfg.Segments))
	for _, s := range d.cfg.Segments {
		key := segmentKey(s.Topology)
		c := s.CapacityBytes
		if o, ok := overrides[key]; ok {
			c = o
		}
		index[key] = len(out)
		out = append(out, segmentUsage{topology: s.Topology, key: key, capacity: c})
	}
	for _, v := range vols {
		if i, ok := index[segmentKey(v.Segment)]; ok {
			out[i].used += v.CapacityBytes
		}
	}
	return out
}

// matches reports whether segment s and topology t overlap: they agree on
// every key both have; a key only one of them has constrains nothing.
//
// With segments zone × rack, the topology {zone: z1} matches the segments
// {zone: z1, rack: r1} and {zone: z1, rack: r2} (a volume there is
// accessible from part of z1; GetCapacity sums both), and with segments of
// zones only, the topology {zone: z1, rack: r1} matches {zone: z1} (a volume
// in z1 is accessible from every rack of it). The empty segment of a driver
// without a segment table matches every topology.
func matches(s, t map[string]string) bool {
	for k, v := range t {
		if sv, ok := s[k]; ok && sv != v {
			return false
		}
	}
	return true
}

// candidates orders the segments a volume may go to, following the CSI
// rules (TopologyRequirement in the spec):
//   - the segments of the preferred topologies, in preferred order;
//   - then, with requisite topologies, the segments of those, in requisite
//     order: the volume must be accessible from one of them;
//   - then, without requisite topologies, every other segment, most free
//     first: the SP may choose any.
//
// Within one topology, segments come in segment-key order, and the
// most-free order breaks ties by segment key, so the choice is
// deterministic.
func candidates(segs []segmentUsage, reqs *csi.TopologyRequirement, maxVolume int64) []segmentUsage {
	requisite := reqs.GetRequisite()
	allowed := func(s segmentUsage) bool {
		if len(requisite) == 0 {
			return true
		}
		for _, t := range requisite {
			if matches(s.topology, t.GetSegments()) {
				return true
			}
		}
		return false
	}
	var out []segmentUsage
	taken := map[string]bool{}
	add := func(s segmentUsage) {
		if !taken[s.key] && allowed(s) {
			taken[s.key] = true
			out = append(out, s)
		}
	}
	for _, t := range append(append([]*csi.Topology(nil), reqs.GetPreferred()...), requisite...) {
		for _, s := range segs {
			if matches(s.topology, t.GetSegments()) {
				add(s)
			}
		}
	}
	if len(requisite) == 0 {
		rest := append([]segmentUsage(nil), segs...)
		sort.SliceStable(rest, func(i, j int) bool { return rest[i].free(maxVolume) > rest[j].free(maxVolume) })
		for _, s := range rest {
			add(s)
		}
	}
	return out
}

// place picks the segment of a new volume of size bytes: the first candidate
// with room. A size above the largest volume is OUT_OF_RANGE; a volume that
// no allowed segment has room for is RESOURCE_EXHAUSTED.
func place(segs []segmentUsage, reqs *csi.TopologyRequirement, size, maxVolume int64) (segmentUsage, error) {
	if size > maxVolume {
		return segmentUsage{}, status.Errorf(codes.OutOfRange,
			"a volume of %d bytes is larger than the largest volume this driver makes (%d bytes)", size, maxVolume)
	}
	cands := candidates(segs, reqs, maxVolume)
	if len(cands) == 0 {
		return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
			"no segment of this driver lies in the requisite topologies %s", describeTopologies(reqs.GetRequisite()))
	}
	for _, s := range cands {
		if size <= s.free(maxVolume) {
			return s, nil
		}
	}
	free := make([]string, 0, len(cands))
	for _, s := range cands {
		free = append(free, fmt.Sprintf("%s: %d bytes free", s.key, s.free(maxVolume)))
	}
	return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
		"no room for %d bytes in the allowed segments [%s]", size, strings.Join(free, "; "))
}

func describeTopologies(ts []*csi.Topology) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, "{"+segmentKey(t.GetSegments())+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// topologies returns the segments of ts.
func topologies(ts []*csi.Topology) []map[string]string {
	out := make([]map[string]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.GetSegments())
	}
	return out
}
