package scheduler

import "fmt"

// Reason is why Filter rejects a node.
type Reason string

// The reasons.
const (
	ReasonDriverNotRegistered        Reason = "CSIDriverNotRegistered"
	ReasonTopologyLabelMissing       Reason = "TopologyLabelMissing"
	ReasonOutsideAllowedTopologies   Reason = "OutsideAllowedTopologies"
	ReasonVolumeLimitExceeded        Reason = "VolumeLimitExceeded"
	ReasonInsufficientCapacity       Reason = "InsufficientCapacity"
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
