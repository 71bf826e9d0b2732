package scheduler

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// attachSlots is what a node's attach limit is compared with for a pod.
type attachSlots struct {
	// limit is the node's attach limit for the driver, nil when none.
	limit *int64
	// attached and pending are what the node's count (package limits)
	// includes; inFlight are the ledger's reservations on the node that the
	// count does not include yet (pods just reserved, not yet annotated),
	// other than the pod's own.
	attached, pending, inFlight int
	// new are the pod's volumes the node does not count yet.
	new int
}

func (s attachSlots) used() int { return s.attached + s.pending + s.inFlight }

// attachSlotsOf counts the node's attach slots for the pod. Without a limit
// nothing is counted. Cost: the node's pods, attachments and pending claims
// (package limits), plus the pod's volumes; independent of the reservations
// in flight.
func (c *Core) attachSlotsOf(podVols *PodVolumes, node *v1.Node, ns *nodeSegment) (attachSlots, error) {
	var s attachSlots
	// The limit comes with the node's segment (ns, the caller's
	// nodeSegment): computed once per version of its Node and CSINode, not
	// read from the listers on every call.
	limit := ns.limit
	if limit == nil {
		return s, nil
	}
	s.limit = limit
	handles, pending, err := c.counter.Volumes(node.Name)
	if err != nil {
		return s, err
	}
	s.attached, s.pending = len(handles), len(pending)
	s.inFlight = c.ledger.InFlight(node.Name, podVols.own, pending, func(volume string) bool {
		h := c.handleOf(volume)
		return h != "" && handles[h]
	})
	// The maps are ours: mark what the pod adds, so that a volume is new
	// once even if the pod names it twice.
	for _, vol := range podVols.Bound {
		if h := vol.Spec.CSI.VolumeHandle; !handles[h] {
			handles[h] = true
			s.new++
		}
	}
	for _, p := range podVols.Pending {
		if key := p.Claim.Namespace + "/" + p.Claim.Name; !pending[key] {
			pending[key] = true
			s.new++
		}
	}
	return s, nil
}

// handleOf returns the volume handle of a PV of the driver, or "".
func (c *Core) handleOf(volume string) string {
	pv, err := c.l.Volumes.Get(volume)
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != c.cfg.Driver {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
}

// filterLimit rejects the node when the pod's new volumes do not fit under
// its attach limit. A bound volume the node already uses or has attached,
// and a pending claim the node already counts, are not new.
func (c *Core) filterLimit(podVols *PodVolumes, node *v1.Node, ns *nodeSegment) *Status {
	if c.counter == nil {
		return nil
	}
	s, err := c.attachSlotsOf(podVols, node, ns)
	if err != nil {
		return unresolvable(ReasonVolumeLimitExceeded, "counting volumes on node %s: %v", node.Name, err)
	}
	if s.limit == nil || int64(s.used()+s.new) <= *s.limit {
		return nil
	}
	return &Status{Reason: ReasonVolumeLimitExceeded, Message: fmt.Sprintf(
		"node %s has %d volumes of %s attached, %d pending and %d reserved in flight, limit %d; the pod needs %d more",
		node.Name, s.attached, c.cfg.Driver, s.pending, s.inFlight, *s.limit, s.new)}
}
