package driver

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// DefaultName is the mock driver's default name.
const DefaultName = "mock.csi.example.com"

// TopologyPrefix is prepended to topology keys given without a '/'.
const TopologyPrefix = "topology.mock.csi.example.com/"

// DefaultMaxVolumeBytes is the default of Config.MaxVolumeBytes: 1 TiB.
const DefaultMaxVolumeBytes = int64(1) << 40

// DefaultMutableParameters are the mutable parameter keys a driver accepts
// unless Config.MutableParameters says otherwise.
var DefaultMutableParameters = []string{"iops", "throughput"}

// Mode selects the CSI services a driver instance serves.
type Mode string

const (
	// ModeController serves Identity and Controller: the instance next to
	// csi-provisioner.
	ModeController Mode = "controller"
	// ModeNode serves Identity and Node: one instance per node.
	ModeNode Mode = "node"
	// ModeBoth serves all three, e.g. for csi-sanity.
	ModeBoth Mode = "both"
)

// SegmentConfig is one topology segment of the controller's segment table.
type SegmentConfig struct {
	// Topology is the segment; keys without '/' get TopologyPrefix.
	Topology map[string]string `json:"topology"`
	// CapacityBytes is the segment's capacity; negative means unlimited. In
	// a segment table file, a missing capacityBytes means unlimited.
	CapacityBytes int64 `json:"capacityBytes"`
}

// Config configures a Driver. The zero value of every field but Endpoint
// (and NodeID for node instances) is usable.
type Config struct {
	// Name is the driver name; default DefaultName.
	Name string
	// Version is reported by GetPluginInfo; default "devel".
	Version string
	// Endpoint is "unix:///path/csi.sock" or a plain path. A stale socket
	// file there is removed.
	Endpoint string
	// Mode selects the services; default ModeBoth.
	Mode Mode
	// NodeID is the node instance's NodeGetInfo node_id (required in
	// ModeNode and ModeBoth).
	NodeID string
	// NodeTopology is the node instance's segment; keys without '/' get
	// TopologyPrefix.
	NodeTopology map[string]string
	// MaxVolumesPerNode is NodeGetInfo's max_volumes_per_node, and the limit
	// ControllerPublishVolume enforces for every node (0: no limit).
	MaxVolumesPerNode int64
	// NodeLimits overrides MaxVolumesPerNode per node ID in
	// ControllerPublishVolume.
	NodeLimits map[string]int64
	// KnownNodes are the node IDs ControllerPublishVolume accepts. Empty:
	// any node in ModeController (a controller cannot see the node
	// instances), only NodeID in ModeBoth.
	KnownNodes []string
	// DisableTopology stops advertising VOLUME_ACCESSIBILITY_CONSTRAINTS;
	// CreateVolume then ignores accessibility requirements and returns no
	// accessible topology.
	DisableTopology bool
	// DisableSnapshots stops advertising CREATE_DELETE_SNAPSHOT and
	// LIST_SNAPSHOTS: CreateSnapshot, DeleteSnapshot and ListSnapshots are
	// UNIMPLEMENTED and CreateVolume refuses a snapshot source with
	// INVALID_ARGUMENT.
	DisableSnapshots bool
	// RegionalSnapshots restores a snapshot into any segment the
	// accessibility requirements allow, as the clouds' zonal disks do
	// (their snapshots are regional). Without it a restore is made in the
	// snapshot's source segment only, as node-local storage does; a clone
	// always is.
	RegionalSnapshots bool
	// DisableCloning stops advertising CLONE_VOLUME: CreateVolume refuses a
	// volume source with INVALID_ARGUMENT.
	DisableCloning bool
	// DisableModify stops advertising MODIFY_VOLUME: ControllerModifyVolume
	// is UNIMPLEMENTED and CreateVolume refuses mutable parameters with
	// INVALID_ARGUMENT.
	DisableModify bool
	// MutableParameters are the mutable parameter keys that CreateVolume
	// and ControllerModifyVolume accept (any value); other keys are
	// INVALID_ARGUMENT. Nil: DefaultMutableParameters.
	MutableParameters []string
	// Segments is the controller's segment table. Empty: one unlimited
	// segment, NodeTopology.
	Segments []SegmentConfig
	// MaxVolumeBytes is the largest volume; larger requests fail with
	// OUT_OF_RANGE. Default DefaultMaxVolumeBytes.
	MaxVolumeBytes int64
	// StateFile persists the controller's volumes; empty keeps them in
	// memory only.
	StateFile string
	// DataDir holds one sub-directory per volume (a file for a block
	// volume) that NodePublishVolume bind-mounts onto the target, so the
	// data survive NodeUnpublishVolume; a relative path is made absolute.
	// Empty: publish creates a plain target directory or file and unpublish
	// removes it with its contents, which needs no mount privileges. Only
	// supported on Linux.
	DataDir string
	// AdminAddress is the admin endpoint's TCP address on a loopback
	// interface, e.g. "127.0.0.1:0"; empty disables it.
	AdminAddress string
	// HealthAddress is the TCP address, on any interface, e.g. ":9808", of
	// a plain-HTTP endpoint that serves GET /healthz only, for liveness
	// probes: 200 while the gRPC server serves and a Probe through it
	// succeeds, 503 otherwise. Empty disables it.
	HealthAddress string
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

// NormalizeSegment returns a copy of s with every key normalized by
// NormalizeKey.
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

// ParseSegment reads "zone=z1,rack=r1" into a normalized segment; an empty
// string is an empty segment.
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
		k = NormalizeKey(k)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("topology %q: key %s given twice", s, k)
		}
		out[k] = v
	}
	return out, nil
}

// SocketPath returns the file system path of a unix endpoint,
// "unix:///run/csi.sock" or "/run/csi.sock".
func SocketPath(endpoint string) (string, error) {
	path := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if scheme != "unix" {
			return "", fmt.Errorf("endpoint %q: only unix sockets are supported", endpoint)
		}
		path = rest
	}
	if path == "" {
		return "", fmt.Errorf("endpoint %q has no path", endpoint)
	}
	return path, nil
}

// checkLoopback accepts a "host:port" address whose host is a loopback
// address or "localhost".
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("admin address %q: the admin endpoint listens on loopback addresses only, e.g. 127.0.0.1:9808", addr)
	}
	return nil
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
	if c.MaxVolumeBytes <= 0 {
		c.MaxVolumeBytes = DefaultMaxVolumeBytes
	}
	if c.MutableParameters == nil {
		c.MutableParameters = slices.Clone(DefaultMutableParameters)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("invalid mock driver configuration: %w", err)
	}
	if c.DataDir != "" {
		dir, err := filepath.Abs(c.DataDir)
		if err != nil {
			return c, fmt.Errorf("invalid mock driver configuration: data directory %q: %w", c.DataDir, err)
		}
		c.DataDir = dir
	}
	c.NodeTopology = NormalizeSegment(c.NodeTopology)
	segs := make([]SegmentConfig, 0, len(c.Segments))
	seen := map[string]bool{}
	for _, s := range c.Segments {
		s.Topology = NormalizeSegment(s.Topology)
		key := segmentKey(s.Topology)
		if seen[key] {
			return c, fmt.Errorf("invalid mock driver configuration: segment %q is listed twice", key)
		}
		seen[key] = true
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		segs = []SegmentConfig{{Topology: c.NodeTopology, CapacityBytes: -1}}
	}
	sort.Slice(segs, func(i, j int) bool { return segmentKey(segs[i].Topology) < segmentKey(segs[j].Topology) })
	c.Segments = segs
	c.Faults = normalizeRules(c.Faults)
	return c, nil
}

func (c Config) validate() error {
	switch c.Mode {
	case ModeController, ModeNode, ModeBoth:
	default:
		return fmt.Errorf("unknown mode %q (want controller, node or both)", c.Mode)
	}
	if _, err := SocketPath(c.Endpoint); err != nil {
		return err
	}
	if c.Mode != ModeController && c.NodeID == "" {
		return fmt.Errorf("mode %s needs a node ID", c.Mode)
	}
	if c.MaxVolumesPerNode < 0 {
		return errors.New("max volumes per node must not be negative")
	}
	for node, l := range c.NodeLimits {
		if l < 0 {
			return fmt.Errorf("volume limit of node %q must not be negative", node)
		}
	}
	if c.DataDir != "" && runtime.GOOS != "linux" {
		return fmt.Errorf("a data directory needs bind mounts, which the mock driver supports on Linux only, not %s", runtime.GOOS)
	}
	if c.AdminAddress != "" {
		if err := checkLoopback(c.AdminAddress); err != nil {
			return err
		}
	}
	if c.HealthAddress != "" {
		if _, _, err := net.SplitHostPort(c.HealthAddress); err != nil {
			return fmt.Errorf("health address %q: %w", c.HealthAddress, err)
		}
	}
	for _, k := range c.MutableParameters {
		if k == "" {
			return errors.New("a mutable parameter key must not be empty")
		}
	}
	for _, r := range c.Faults {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// normalizeRules normalizes the segment keys of fault rules.
func normalizeRules(rules []faults.Rule) []faults.Rule {
	out := make([]faults.Rule, 0, len(rules))
	for _, r := range rules {
		r.Segment = NormalizeSegment(r.Segment)
		out = append(out, r)
	}
	return out
}

// segmentKey is the canonical "k=v,k=v" string of a segment, keys sorted.
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
