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

func (s segmentUsage) free(maxVolume int64) int64 {
	if s.capacity < 0 {
		return maxVolume
	}
	return s.capacity - s.used
}

// usage returns every segment with its usage, in segment-key order. Called
// with the store locked (vols is the store's map).
func (d *Driver) usage(vols map[string]*state.Volume) []segmentUsage {
	d.mu.Lock()
	overrides := make(map[string]int64, len(d.capacity))
	for k, v := range d.capacity {
		overrides[k] = v
	}
	d.mu.Unlock()
	out := make([]segmentUsage, 0, len(d.cfg.Segments))
	index := map[string]int{}
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

// within reports whether segment s lies in topology t: every key of t has
// the same value in s.
func within(s, t map[string]string) bool {
	for k, v := range t {
		if s[k] != v {
			return false
		}
	}
	return true
}

// candidates orders the segments a volume may go to, following the CSI
// rules: preferred topologies in order, then the remaining requisite ones in
// order; without requirements every segment, most free space first.
func candidates(segs []segmentUsage, reqs *csi.TopologyRequirement, maxVolume int64) []segmentUsage {
	if len(reqs.GetRequisite()) == 0 && len(reqs.GetPreferred()) == 0 {
		out := append([]segmentUsage(nil), segs...)
		sort.SliceStable(out, func(i, j int) bool { return out[i].free(maxVolume) > out[j].free(maxVolume) })
		return out
	}
	allowed := func(s segmentUsage) bool {
		if len(reqs.GetRequisite()) == 0 {
			return true
		}
		for _, t := range reqs.GetRequisite() {
			if within(s.topology, t.GetSegments()) {
				return true
			}
		}
		return false
	}
	var out []segmentUsage
	taken := map[string]bool{}
	add := func(ts []*csi.Topology) {
		for _, t := range ts {
			for _, s := range segs {
				if !taken[s.key] && within(s.topology, t.GetSegments()) && allowed(s) {
					taken[s.key] = true
					out = append(out, s)
				}
			}
		}
	}
	add(reqs.GetPreferred())
	add(reqs.GetRequisite())
	return out
}

// place picks the segment of a new volume of size bytes: the first candidate
// with room. A size above the driver's largest volume is OUT_OF_RANGE; a
// volume no allowed segment has room for is RESOURCE_EXHAUSTED.
func place(segs []segmentUsage, reqs *csi.TopologyRequirement, size, maxVolume int64) (segmentUsage, error) {
	if size > maxVolume {
		return segmentUsage{}, status.Errorf(codes.OutOfRange,
			"a volume of %d bytes is larger than the largest volume this driver makes (%d bytes)", size, maxVolume)
	}
	cands := candidates(segs, reqs, maxVolume)
	if len(cands) == 0 {
		return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
			"no segment of this driver satisfies the accessibility requirements %s", describeRequirements(reqs))
	}
	for _, s := range cands {
		if size <= s.free(maxVolume) {
			return s, nil
		}
	}
	keys := make([]string, 0, len(cands))
	for _, s := range cands {
		keys = append(keys, fmt.Sprintf("%s (%d bytes free)", s.key, s.free(maxVolume)))
	}
	return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
		"no room for %d bytes in the allowed segments: %s", size, strings.Join(keys, "; "))
}

func describeRequirements(reqs *csi.TopologyRequirement) string {
	var parts []string
	for _, t := range reqs.GetRequisite() {
		parts = append(parts, segmentKey(t.GetSegments()))
	}
	return "[" + strings.Join(parts, " | ") + "]"
}

func topologies(ts []*csi.Topology) []map[string]string {
	out := make([]map[string]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.GetSegments())
	}
	return out
}
