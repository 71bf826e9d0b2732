package scheduler

import "fmt"

// Reason is why Filter rejects a node.
type Reason string

// The reasons Filter gives. Each is the prefix of the message a front end
// reports for a rejected node.
const (
	// ReasonDriverNotRegistered means the node's CSINode has no entry for the
	// driver (or the node has no CSINode), so the node can neither
	// provision for nor mount the pod's volumes of the driver. Unresolvable.
	ReasonDriverNotRegistered Reason = "CSIDriverNotRegistered"
	// ReasonDriverNotLive means the driver's heartbeat Lease for the node
	// (renewed by csi-node-publisher while the driver answers Probe) has
	// expired: the driver crashed or hangs there, so a new volume selected
	// for the node would wait for it forever. Only pods with pending
	// delayed-binding claims are rejected for it; a node without a
	// heartbeat Lease is never. Unresolvable.
	ReasonDriverNotLive Reason = "CSIDriverNotLive"
	// ReasonTopologyLabelMissing means the node lacks a label for one of the
	// topology keys the driver reports in its CSINode entry, so it has no
	// segment for a new volume. Unresolvable.
	ReasonTopologyLabelMissing Reason = "TopologyLabelMissing"
	// ReasonOutsideAllowedTopologies means the node's labels do not satisfy the
	// allowedTopologies of a pending claim's class. Unresolvable.
	ReasonOutsideAllowedTopologies Reason = "OutsideAllowedTopologies"
	// ReasonDataSourceUnreachable means a pending claim's data source (the
	// claim it clones, or the claim its VolumeSnapshot was taken of) is
	// bound to a volume whose node affinity excludes the node, so the copy
	// cannot be made where the node can use it. Unresolvable.
	ReasonDataSourceUnreachable Reason = "DataSourceUnreachable"
	// ReasonDataSourceUnknown means a pending claim restores a VolumeSnapshot
	// that is not known yet (it does not exist yet, or the snapshot API is
	// not served yet), so where its source volume can be reached is not
	// known either: every node is rejected until it is, and the pod is
	// retried when the snapshot appears. Unresolvable.
	ReasonDataSourceUnknown Reason = "DataSourceUnknown"
	// ReasonVolumeLimitExceeded means the pod's new volumes, added to what the
	// node already counts (attached, pending and reserved in flight), exceed
	// the node's attach limit for the driver. Resolvable: evicting pods
	// frees slots.
	ReasonVolumeLimitExceeded Reason = "VolumeLimitExceeded"
	// ReasonInsufficientCapacity means the capacity published for the node's
	// segment and a class is below the pod's requests of that class plus
	// the reservations in flight there, or a claim exceeds the largest
	// volume the segment can hold. Unresolvable.
	ReasonInsufficientCapacity Reason = "InsufficientCapacity"
	// ReasonVolumeNodeAffinityConflict means a bound volume's node affinity
	// excludes the node. Unresolvable.
	ReasonVolumeNodeAffinityConflict Reason = "VolumeNodeAffinityConflict"
)

// Status is Filter's verdict on a node that does not fit.
type Status struct {
	Reason  Reason
	Message string
	// Unresolvable: preemption cannot help (storage misfits); otherwise
	// (attach limits) evicting pods could free room.
	Unresolvable bool
}

// String implements fmt.Stringer.
func (s *Status) String() string { return fmt.Sprintf("%s: %s", s.Reason, s.Message) }

func unresolvable(r Reason, format string, args ...any) *Status {
	return &Status{Reason: r, Message: fmt.Sprintf(format, args...), Unresolvable: true}
}
