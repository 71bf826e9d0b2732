package scheduler

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// ScoreWeights weigh the two parts of Score. Its JSON form is the plugin's
// scoreWeights argument.
type ScoreWeights struct {
	// FreeCapacity weighs the share of the node's segment capacity left
	// free after the pod's claims and the reservations in flight.
	FreeCapacity int64 `json:"freeCapacity"`
	// VolumeHeadroom weighs the share of the node's attach limit left free
	// after the pod's new volumes (nodes without a limit score full marks).
	VolumeHeadroom int64 `json:"volumeHeadroom"`
}

// DefaultScoreWeights scores free capacity only.
func DefaultScoreWeights() ScoreWeights { return ScoreWeights{FreeCapacity: 1, VolumeHeadroom: 0} }

// ErrScoreWeights is wrapped by the errors of ScoreWeights.Validate.
var ErrScoreWeights = errors.New("invalid score weights")

// Validate rejects negative weights and weights that are both zero.
func (w ScoreWeights) Validate() error {
	if w.FreeCapacity < 0 || w.VolumeHeadroom < 0 {
		return fmt.Errorf("%w: freeCapacity %d and volumeHeadroom %d must not be negative", ErrScoreWeights, w.FreeCapacity, w.VolumeHeadroom)
	}
	if w.FreeCapacity == 0 && w.VolumeHeadroom == 0 {
		return fmt.Errorf("%w: freeCapacity and volumeHeadroom are both 0", ErrScoreWeights)
	}
	return nil
}

// Score rates a node that passed Filter from 0 to MaxScore: the mean of
// capacityScore and headroomScore weighted by Config.ScoreWeights. A part
// whose weight is 0 is not computed.
func (c *Core) Score(podVols *PodVolumes, node *v1.Node) int64 {
	if podVols == nil {
		return 0
	}
	w := c.cfg.ScoreWeights
	var sum float64
	if w.FreeCapacity > 0 {
		sum += float64(w.FreeCapacity) * c.capacityScore(podVols, node)
	}
	if w.VolumeHeadroom > 0 {
		sum += float64(w.VolumeHeadroom) * c.headroomScore(podVols, node)
	}
	return int64(sum / (float64(w.FreeCapacity) + float64(w.VolumeHeadroom)) * MaxScore)
}

// capacityScore is the fraction (0..1) of the node's segment capacity left
// free after this pod's claims and the reservations of others, averaged
// over the pod's classes. Pods without pending claims, and classes without
// capacity information, score 0.
func (c *Core) capacityScore(podVols *PodVolumes, node *v1.Node) float64 {
	if len(podVols.Pending) == 0 || c.l.Capacities == nil {
		return 0
	}
	ns := c.nodeSegment(node)
	if ns.st != nil {
		return 0
	}
	return c.capacityView(podVols, node, ns).score
}

// headroomScore is the fraction (0..1) of the node's attach limit left free
// after the pod's new volumes (attachSlotsOf): 1 without a limit or a
// counter, 0 when the count fails.
func (c *Core) headroomScore(podVols *PodVolumes, node *v1.Node) float64 {
	if c.counter == nil {
		return 1
	}
	s, err := c.attachSlotsOf(podVols, node, c.nodeSegment(node))
	switch {
	case err != nil:
		return 0
	case s.limit == nil:
		return 1
	case *s.limit <= 0:
		return 0
	}
	left := *s.limit - int64(s.used()+s.new)
	if left < 0 {
		left = 0
	}
	return float64(left) / float64(*s.limit)
}
