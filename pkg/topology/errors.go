package topology

import (
	"errors"
	"fmt"
)

// ErrNodeIneligible is matched (errors.Is) by every error that says the
// selected node can never host the claim's volume: the scheduler must pick
// another node. See NodeError.
var ErrNodeIneligible = errors.New("selected node cannot host the volume")

// ErrInvalidTopology marks a configuration error in a StorageClass's
// allowedTopologies. Retrying does not help until the class is fixed.
var ErrInvalidTopology = errors.New("invalid allowedTopologies")

// ErrNoAllowedSegment says that no segment of the driver satisfies a class's
// allowedTopologies. It may heal when nodes with such segments register.
var ErrNoAllowedSegment = errors.New("no allowed segment")

// ErrSourceUnreachable says that no segment the volume may be placed in can
// reach the claim's data source (an immediate-binding clone or restore). It
// may heal when nodes register in a segment that reaches the source.
var ErrSourceUnreachable = errors.New("data source unreachable")

// NodeReason says why a node can never host a volume.
type NodeReason string

// The reasons a node is ineligible.
const (
	// NodeNotFound: the selected node does not exist (any more).
	NodeNotFound NodeReason = "NodeNotFound"
	// CSINodeMissing: the node has no CSINode object.
	CSINodeMissing NodeReason = "CSINodeMissing"
	// DriverNotRegistered: the node's CSINode has no entry for the driver.
	DriverNotRegistered NodeReason = "DriverNotRegistered"
	// TopologyLabelMissing: the node lacks a label for one of the driver's
	// topology keys.
	TopologyLabelMissing NodeReason = "TopologyLabelMissing"
	// OutsideAllowedTopologies: the node's labels do not satisfy the class's
	// allowedTopologies.
	OutsideAllowedTopologies NodeReason = "OutsideAllowedTopologies"
	// SourceUnreachable: the node cannot reach the claim's data source (the
	// volume a clone copies or a snapshot was taken of), see Reach.
	SourceUnreachable NodeReason = "SourceUnreachable"
)

// NodeError says that a node can never host a volume, and why. It matches
// ErrNodeIneligible with errors.Is.
type NodeError struct {
	// Node is the node's name.
	Node string
	// Reason is the machine-readable reason.
	Reason NodeReason
	// Detail is the operator-readable explanation.
	Detail string
}

// Error implements error.
func (e *NodeError) Error() string {
	return fmt.Sprintf("node %q cannot host the volume (%s): %s", e.Node, e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrNodeIneligible) true for every NodeError.
func (e *NodeError) Is(target error) bool { return target == ErrNodeIneligible }

func nodeError(node string, reason NodeReason, format string, args ...any) error {
	return &NodeError{Node: node, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
