package driver

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// DefaultName is the mock driver's default name.
const DefaultName = "mock.csi.example.com"

// TopologyPrefix is prepended to topology keys given without a '/'.
const TopologyPrefix = "topology.mock.csi.example.com/"

// DefaultMaxVolumeBytes is the largest volume the driver creates when no
// segment limits it; larger requests fail with OUT_OF_RANGE.
const DefaultMaxVolumeBytes = int64(1) << 40

// Mode selects the services a driver instance serves.
type Mode string

// The modes.
const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeBoth       Mode = "both"
)

// SegmentConfig is one topology segment of the controller's segment table.
type SegmentConfig struct {
	// Topology is the segment; keys without '/' get TopologyPrefix.
	Topology map[string]string `json:"topology"`
	// CapacityBytes is the segment's capacity; negative means unlimited.
	CapacityBytes int64 `json:"capacityBytes"`
}

// Config configures a Driver.
type Config struct {
	// Name is the driver name; default DefaultName.
	Name string
	// Version is reported by GetPluginInfo.
	Version string
	// Endpoint is "unix:///path/csi.sock" or a plain path.
	Endpoint string
	// Mode selects the services; default ModeBoth.
	Mode Mode
	// NodeID is the node instance's node_id.
	NodeID string
	// NodeTopology is the node instance's segment.
	NodeTopology map[string]string
	// MaxVolumesPerNode is reported by NodeGetInfo and enforced by
	// ControllerPublishVolume for every node (0: no limit).
	MaxVolumesPerNode int64
	// NodeLimits overrides MaxVolumesPerNode per node ID in
	// ControllerPublishVolume.
	NodeLimits map[string]int64
	// KnownNodes are the node IDs ControllerPublishVolume accepts; empty
	// accepts any node in ModeController and only NodeID in ModeBoth.
	KnownNodes []string
	// DisableTopology stops advertising VOLUME_ACCESSIBILITY_CONSTRAINTS.
	DisableTopology bool
	// Segments is the controller's segment table; empty means one unlimited
	// segment, NodeTopology.
	Segments []SegmentConfig
	// MaxVolumeBytes bounds a single volume; default DefaultMaxVolumeBytes.
	MaxVolumeBytes int64
	// StateFile persists volumes; empty keeps them in memory.
	StateFile string
	// AdminAddress is the admin endpoint's TCP address; empty disables it.
	AdminAddress string
	// Faults are the initial fault rules.
	Faults []faults.Rule
}

// NormalizeKey prepends TopologyPrefix to a key without '/'.
func NormalizeKey(k string) string {
	if strings.Contains(k, "/") {
		return k
	}
	return TopologyPrefix + k
}

// NormalizeSegment normalizes every key of a segment.
func NormalizeSegment(s map[string]string) map[string]string {
	if s == nil {
		return nil
	}
	out := make(map[string]string, len(s))
	for k, v := range s {
		out[NormalizeKey(k)] = v
	}
	return out
}

// ParseSegment reads "zone=z1,rack=r1" into a normalized segment.
func ParseSegment(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("topology %q: want key=value pairs separated by commas", s)
		}
		out[NormalizeKey(k)] = v
	}
	return out, nil
}

// segmentsFile is the JSON form of a segment table file.
type segmentsFile struct {
	Segments []struct {
		Topology      map[string]string `json:"topology"`
		CapacityBytes *int64            `json:"capacityBytes"`
	} `json:"segments"`
	NodeLimits map[string]int64 `json:"nodeLimits"`
}

// LoadSegmentsFile reads a segment table:
//
//	{"segments":[{"topology":{"zone":"z1"},"capacityBytes":10737418240}],
//	 "nodeLimits":{"node-1":2}}
//
// A segment without capacityBytes is unlimited.
func LoadSegmentsFile(path string) ([]SegmentConfig, map[string]int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading segments file: %w", err)
	}
	var f segmentsFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("parsing segments file %q: %w", path, err)
	}
	segs := make([]SegmentConfig, 0, len(f.Segments))
	for _, s := range f.Segments {
		c := SegmentConfig{Topology: NormalizeSegment(s.Topology), CapacityBytes: -1}
		if s.CapacityBytes != nil {
			c.CapacityBytes = *s.CapacityBytes
		}
		segs = append(segs, c)
	}
	return segs, f.NodeLimits, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Version == "" {
		c.Version = "devel"
	}
	if c.Mode == "" {
		c.Mode = ModeBoth
	}
	switch c.Mode {
	case ModeController, ModeNode, ModeBoth:
	default:
		return c, fmt.Errorf("unknown mode %q (want controller, node or both)", c.Mode)
	}
	if c.Endpoint == "" {
		return c, fmt.Errorf("an endpoint is required")
	}
	if c.Mode != ModeController && c.NodeID == "" {
		return c, fmt.Errorf("mode %s needs a node ID", c.Mode)
	}
	if c.MaxVolumesPerNode < 0 {
		return c, fmt.Errorf("max volumes per node must not be negative")
	}
	if c.MaxVolumeBytes <= 0 {
		c.MaxVolumeBytes = DefaultMaxVolumeBytes
	}
	c.NodeTopology = NormalizeSegment(c.NodeTopology)
	segs := make([]SegmentConfig, 0, len(c.Segments))
	seen := map[string]bool{}
	for _, s := range c.Segments {
		s.Topology = NormalizeSegment(s.Topology)
		key := segmentKey(s.Topology)
		if seen[key] {
			return c, fmt.Errorf("segment %s is listed twice", key)
		}
		seen[key] = true
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		segs = []SegmentConfig{{Topology: c.NodeTopology, CapacityBytes: -1}}
	}
	sort.Slice(segs, func(i, j int) bool { return segmentKey(segs[i].Topology) < segmentKey(segs[j].Topology) })
	c.Segments = segs
	for _, r := range c.Faults {
		if err := r.Validate(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// segmentKey is the canonical "k=v,k=v" string of a segment.
func segmentKey(s map[string]string) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+s[k])
	}
	return strings.Join(parts, ",")
}
