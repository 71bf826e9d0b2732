package topology

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

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
	// Source is where the claim's data source (the volume a clone copies,
	// or the volume a snapshot was taken of) can be read from; the zero
	// Reach does not constrain anything.
	Source Reach
	// SourceName names the data source in errors, e.g.
	// `PersistentVolumeClaim "ns/db"`.
	SourceName string
	// SourceBasis says why Source narrows the copy (CopyReach); errors
	// name it when set.
	SourceBasis CopyBasis
}

// Requirements builds the accessibility requirements of CreateVolume.
//
// The rule for AllowedTopologies, in both modes: a segment may be asked for
// only if at least one node of the driver in it (one the Index counts: a
// CSINode entry with topology keys and labels for all of them) satisfies a
// whole term, with the same matching as MatchLabels, so expressions on labels
// that are not driver topology keys count too. A combination of the terms
// that no such node forms is never asked for. The Index keeps these segments
// current, so a claim costs O(segments), not O(nodes).
//
// Delayed binding (SelectedNodeName set): the keys come from the node's
// CSINode entry for the driver and the node's segment from its labels for
// those keys; the node must satisfy AllowedTopologies. preferred[0] is the
// node's segment, followed by the other requisite segments in requisite
// order starting after it. requisite is the node's own segment (the node
// itself was checked, even before the index has seen it) and every other
// segment with the same keys that the rule above allows (without
// AllowedTopologies: every known segment with those keys). With Strict,
// requisite and preferred are exactly the node's segment. Errors are
// *NodeError (ErrNodeIneligible) or wrap ErrInvalidTopology.
//
// Immediate binding: with AllowedTopologies, requisite is every segment, of
// every key set, that the rule above allows. When there is none, because no
// node of the driver reports topology yet or because none of them satisfies
// a term, requisite is the terms as written (Flatten), as upstream
// external-provisioner sends them, and Placement.TermsAsWritten says so: a
// node group scaled to zero gets its first node only once a pod needs one,
// and the pod waits for this volume. Never "no requirements", which would
// let the driver put the volume anywhere: terms that allow nothing (a term
// without expressions) are an error wrapping ErrNoAllowedSegment that names
// the terms and says why. Without AllowedTopologies and with Immediate,
// requisite is every known segment. Otherwise, or when no segment is known,
// there are no requirements (nil): the class does not restrict the volume.
// preferred is requisite rotated by a stable hash of the claim name; for a
// StatefulSet claim "data-web-3" the hash is of "data-web" and the rotation
// is offset by 3, so replicas start on consecutive segments.
//
// Example: zone is the only driver key; nodes a (zone=z1, pool=gold),
// b (zone=z2) and c (zone=z3, pool=gold); the class allows
// [{zone in (z1,z2), pool in (gold)}]. Immediate: requisite is [zone=z1]
// (b is in z2 but not gold, c is gold but in z3). Delayed on node a: the
// same. With [{example.com/unknown in (x)}], which no node carries,
// immediate binding asks for requisite [example.com/unknown=x], the term as
// written.
//
// A constrained Source narrows both modes to the segments that can reach
// it (Reach.Segment): a delayed-binding node that cannot reach the source
// (Reach.Node) is a *NodeError with reason SourceUnreachable, and an
// immediate-binding claim whose candidate segments (the requisite above, or
// every known segment when that is unrestricted) include none that reaches
// the source fails with ErrSourceUnreachable. Example: the source PV's
// affinity is zone in (z1); delayed on a node of z2: SourceUnreachable;
// on a node of z1: requisite [zone=z1] only; immediate with segments z1,
// z2, z3 known and no allowedTopologies: requisite [zone=z1].
//
// requisite is sorted by Segment.String.
func Requirements(in RequirementsInput) (*csi.TopologyRequirement, error) {
	p, err := Place(in)
	return p.Requirement, err
}

// Placement is the outcome of Place.
type Placement struct {
	// Requirement is CreateVolume's accessibility requirements; nil: none.
	Requirement *csi.TopologyRequirement
	// TermsAsWritten: an immediate-binding claim's requisite is its class's
	// allowedTopologies as written, because no known node of the driver is
	// in a segment they allow (see Requirements).
	TermsAsWritten bool
}

// Place is Requirements, and also says how the requirements were chosen.
func Place(in RequirementsInput) (Placement, error) {
	if in.SelectedNodeName != "" {
		r, err := delayedRequirements(in)
		return Placement{Requirement: r}, err
	}
	return immediateRequirements(in)
}

func delayedRequirements(in RequirementsInput) (*csi.TopologyRequirement, error) {
	name := in.SelectedNodeName
	if in.SelectedNode == nil {
		return nil, nodeError(name, NodeNotFound, "the node no longer exists")
	}
	if err := validateTerms(in.AllowedTopologies); err != nil {
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
	if !in.Source.Node(name, in.SelectedNode.Labels) {
		return nil, nodeError(name, SourceUnreachable,
			"the node (segment %s) cannot reach the data source %s, whose volume is accessible from %s only%s",
			seg, in.sourceName(), in.Source, in.sourceWhy())
	}
	if in.Strict {
		t := toCSI([]Segment{seg})
		return &csi.TopologyRequirement{Requisite: t, Preferred: t}, nil
	}
	var others []Segment
	switch {
	case in.Index == nil:
	case len(in.AllowedTopologies) == 0:
		others = in.Index.Segments(keys)
	default:
		others, _ = in.Index.allowed(in.AllowedTopologies, keys)
	}
	others = in.Source.FilterSegments(others)
	requisite := make([]Segment, 0, len(others)+1)
	requisite = append(requisite, seg)
	requisite = sortSegments(append(requisite, others...))
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

func immediateRequirements(in RequirementsInput) (Placement, error) {
	var requisite []Segment
	asWritten := false
	switch {
	case len(in.AllowedTopologies) > 0:
		var err error
		if requisite, asWritten, err = allowedSegments(in); err != nil {
			return Placement{}, err
		}
	case in.Immediate && in.Index != nil:
		requisite = in.Index.allSegments()
	}
	if in.Source.Constrained() {
		candidates := requisite
		if len(candidates) == 0 && in.Index != nil {
			candidates = in.Index.allSegments()
		}
		requisite = in.Source.FilterSegments(candidates)
		if len(candidates) > 0 && len(requisite) == 0 {
			return Placement{}, fmt.Errorf("%w: the data source %s is accessible from %s only, and none of the %d segment(s) the volume may be placed in (%s) reaches it%s",
				ErrSourceUnreachable, in.sourceName(), in.Source, len(candidates), formatSegments(candidates), in.sourceWhy())
		}
	}
	if len(requisite) == 0 {
		return Placement{}, nil
	}
	return Placement{TermsAsWritten: asWritten, Requirement: &csi.TopologyRequirement{
		Requisite: toCSI(requisite),
		Preferred: toCSI(rotate(requisite, spreadOffset(in.ClaimName, len(requisite)))),
	}}, nil
}

// allowedSegments returns the segments, of every key set, in which some node
// of the driver satisfies the class's allowedTopologies (see Requirements);
// when there is none, the terms as written (Flatten) and asWritten. The
// error wraps ErrInvalidTopology, or ErrNoAllowedSegment when the terms
// allow nothing; never an empty list without an error.
func allowedSegments(in RequirementsInput) (segs []Segment, asWritten bool, err error) {
	if err := validateTerms(in.AllowedTopologies); err != nil {
		return nil, false, err
	}
	if in.Index != nil {
		segs, _ = in.Index.allowed(in.AllowedTopologies, nil)
	}
	if len(segs) > 0 {
		return segs, false, nil
	}
	if segs, err = Flatten(in.AllowedTopologies); err != nil || len(segs) > 0 {
		return segs, err == nil, err
	}
	return nil, false, fmt.Errorf("%w: the StorageClass's allowedTopologies %s allow no segment (a term without expressions)",
		ErrNoAllowedSegment, formatTerms(in.AllowedTopologies))
}

func (in RequirementsInput) sourceName() string {
	if in.SourceName == "" {
		return "(unnamed)"
	}
	return in.SourceName
}

// sourceWhy is "" or, in parentheses, why the copy is narrowed to its source.
func (in RequirementsInput) sourceWhy() string {
	if in.SourceBasis == "" {
		return ""
	}
	return " (" + in.SourceBasis.Explain() + ")"
}

// formatSegments lists up to five segments, then how many more.
func formatSegments(segs []Segment) string {
	const most = 5
	parts := make([]string, 0, most+1)
	for i, s := range segs {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(segs)-most))
			break
		}
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ", ")
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
