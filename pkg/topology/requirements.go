package topology

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// RequirementsInput is what Requirements needs to know about a claim.
type RequirementsInput struct {
	// Driver is the CSI driver name.
	Driver string
	// SelectedNode is the node the scheduler chose, nil for immediate
	// binding, or nil with SelectedNodeName set when the node is gone.
	SelectedNode *v1.Node
	// SelectedNodeName is the claim's volume.kubernetes.io/selected-node
	// annotation; empty for immediate binding.
	SelectedNodeName string
	// CSINode is the selected node's CSINode, nil when it has none.
	CSINode *storagev1.CSINode
	// AllowedTopologies is the class's allowedTopologies.
	AllowedTopologies []v1.TopologySelectorTerm
	// Strict restricts delayed-binding requirements to the node's segment.
	Strict bool
	// Immediate sends all known segments for immediate binding without
	// allowedTopologies.
	Immediate bool
	// ClaimName spreads immediate-binding claims over segments.
	ClaimName string
	// Index holds the segments known for the driver.
	Index *Index
}

// Requirements builds the accessibility requirements of CreateVolume.
//
// Delayed binding (SelectedNodeName set): the keys come from the node's
// CSINode entry for the driver and the node's segment from its labels for
// those keys; the node must satisfy AllowedTopologies. preferred[0] is the
// node's segment, followed by the other requisite segments in requisite
// order starting after it. requisite is every segment the index knows with
// the same keys that AllowedTopologies allows, and always the node's own
// segment. With Strict, requisite and preferred are exactly the node's
// segment. Errors are *NodeError (ErrNodeIneligible) or wrap
// ErrInvalidTopology.
//
// Immediate binding: with AllowedTopologies, requisite is every segment of
// the driver it allows (see allowedSegments); none is an error wrapping
// ErrNoAllowedSegment, never "no requirements", which would let the driver
// put the volume anywhere. Without AllowedTopologies and with Immediate,
// requisite is every known segment. Otherwise, or when no segment is known,
// there are no requirements (nil). preferred is requisite
// rotated by a stable hash of the claim name; for a StatefulSet claim
// "data-web-3" the hash is of "data-web" and the rotation is offset by 3, so
// replicas start on consecutive segments.
//
// requisite is sorted by Segment.String.
func Requirements(in RequirementsInput) (*csi.TopologyRequirement, error) {
	if in.SelectedNodeName != "" {
		return delayedRequirements(in)
	}
	return immediateRequirements(in)
}

func delayedRequirements(in RequirementsInput) (*csi.TopologyRequirement, error) {
	name := in.SelectedNodeName
	if in.SelectedNode == nil {
		return nil, nodeError(name, NodeNotFound, "the node no longer exists")
	}
	if _, err := Flatten(in.AllowedTopologies); err != nil {
		return nil, err
	}
	if in.CSINode == nil {
		return nil, nodeError(name, CSINodeMissing,
			"the node has no CSINode object, so CSI driver %q is not registered there", in.Driver)
	}
	keys, err := DriverKeys(in.CSINode, in.Driver)
	if err != nil {
		if ne, ok := err.(*NodeError); ok {
			ne.Node = name
		}
		return nil, err
	}
	if len(keys) == 0 {
		// The driver reports no topology on this node: nothing to require.
		return nil, nil
	}
	seg, missing := segmentFromLabels(in.SelectedNode.Labels, keys)
	if missing != "" {
		return nil, nodeError(name, TopologyLabelMissing,
			"the node has no label %q, a topology key of CSI driver %q", missing, in.Driver)
	}
	if !MatchLabels(in.AllowedTopologies, in.SelectedNode.Labels) {
		return nil, nodeError(name, OutsideAllowedTopologies,
			"the node's segment %s is outside the StorageClass's allowedTopologies", seg)
	}
	if in.Strict {
		t := toCSI([]Segment{seg})
		return &csi.TopologyRequirement{Requisite: t, Preferred: t}, nil
	}
	var known []Segment
	if in.Index != nil {
		known = in.Index.Segments(keys)
	}
	requisite := make([]Segment, 0, len(known)+1)
	requisite = append(requisite, seg)
	for _, s := range known {
		if allowsSegment(in.AllowedTopologies, s) {
			requisite = append(requisite, s)
		}
	}
	requisite = sortSegments(requisite)
	own := seg.String()
	start := 0
	for i, s := range requisite {
		if s.String() == own {
			start = i
			break
		}
	}
	return &csi.TopologyRequirement{
		Requisite: toCSI(requisite),
		Preferred: toCSI(rotate(requisite, start)),
	}, nil
}

func immediateRequirements(in RequirementsInput) (*csi.TopologyRequirement, error) {
	var requisite []Segment
	switch {
	case len(in.AllowedTopologies) > 0:
		flat, err := Flatten(in.AllowedTopologies)
		if err != nil {
			return nil, err
		}
		if requisite = allowedSegments(in.AllowedTopologies, flat, in.Index); len(requisite) == 0 {
			return nil, fmt.Errorf("%w: no segment of CSI driver %q satisfies the StorageClass's allowedTopologies", ErrNoAllowedSegment, in.Driver)
		}
	case in.Immediate && in.Index != nil:
		requisite = in.Index.allSegments()
	}
	if len(requisite) == 0 {
		return nil, nil
	}
	return &csi.TopologyRequirement{
		Requisite: toCSI(requisite),
		Preferred: toCSI(rotate(requisite, spreadOffset(in.ClaimName, len(requisite)))),
	}, nil
}

// allowedSegments returns the segments allowedTopologies allows for the
// driver: for every key set the index knows, the known segments the terms
// allow (terms may name only some of the driver's keys, or other labels),
// plus every flattened combination that covers the key set, projected onto
// it (so a segment no node reports yet can still be asked for). When the
// index knows no key sets, the flattened segments are kept as written.
func allowedSegments(terms []v1.TopologySelectorTerm, flat []Segment, index *Index) []Segment {
	var keySets [][]string
	if index != nil {
		keySets = index.KeySets()
	}
	if len(keySets) == 0 {
		return flat
	}
	var out []Segment
	for _, keys := range keySets {
		for _, s := range index.Segments(keys) {
			if allowsSegment(terms, s) {
				out = append(out, s)
			}
		}
		for _, seg := range flat {
			if p, ok := seg.Project(keys); ok {
				out = append(out, p)
			}
		}
	}
	return sortSegments(out)
}

var statefulSetOrdinal = regexp.MustCompile(`^(.*)-([0-9]+)$`)

// spreadOffset returns where a claim's preferred list starts: FNV-1a of the
// claim name, or for "<base>-<ordinal>" of the base plus the ordinal.
func spreadOffset(claimName string, n int) int {
	if n <= 1 {
		return 0
	}
	base, ordinal := claimName, uint64(0)
	if m := statefulSetOrdinal.FindStringSubmatch(claimName); m != nil {
		if o, err := strconv.ParseUint(m[2], 10, 32); err == nil {
			base, ordinal = m[1], o
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(base))
	return int((uint64(h.Sum32()) + ordinal) % uint64(n))
}

// rotate returns segs starting at index start, wrapping around.
func rotate(segs []Segment, start int) []Segment {
	out := make([]Segment, 0, len(segs))
	out = append(out, segs[start:]...)
	return append(out, segs[:start]...)
}

func toCSI(segs []Segment) []*csi.Topology {
	out := make([]*csi.Topology, 0, len(segs))
	for _, s := range segs {
		m := make(map[string]string, len(s))
		for k, v := range s {
			m[k] = v
		}
		out = append(out, &csi.Topology{Segments: m})
	}
	return out
}
