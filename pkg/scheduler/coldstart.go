package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// ReasonCapacityNotPublished means a pending claim's class is new and the
// capacity objects of some of the segments it may use are not published
// yet: the pod waits for them (CapacityNotPublished), instead of going to
// the segments that happened to publish first. Resolvable; the pod is tried
// again when an object appears, and at the end of the wait at the latest.
const ReasonCapacityNotPublished Reason = "CapacityNotPublished"

// DefaultCapacityPublishGrace is Config.CapacityPublishGrace's default.
const DefaultCapacityPublishGrace = 30 * time.Second

// Why a new class waits (the cold start).
//
// With node deployment every node's csi-provisioner publishes the capacity
// objects of its own node, and for a class just created each does so when
// its own class event, GetCapacity call and create have run: tens of
// milliseconds apart on an idle cluster, seconds apart when a driver is slow
// to answer. kube-scheduler's VolumeBinding (CSIDriver.storageCapacity)
// counts a segment without an object as full, so every pod scheduled in
// between goes to the nodes that published first; a StatefulSet created
// with its class lands entirely on one node. A missing object of a young
// class therefore means "not published yet", and the pod waits. Of an older
// class it means what it always did (no room, or a segment nobody
// publishes for), or the pod would wait forever for a node whose
// provisioner never publishes.

// CapacityNotPublished returns a CapacityNotPublished Status when one of
// the pod's pending classes was created less than Config.CapacityPublishGrace
// ago and a segment among nodes that it may use has no capacity object of
// it yet, while another segment has one or the driver's CSIDriver has
// storageCapacity (Listers.CSIDrivers), with how long the wait may still last;
// nil otherwise. A node is
// counted when it has a segment of the driver, lies in the class's
// allowedTopologies and its driver is not known to be silent. Cost: O(1)
// unless a class is young, then one capacity lookup per distinct segment.
func (c *Core) CapacityNotPublished(podVols *PodVolumes, nodes []*v1.Node) (*Status, time.Duration) {
	if podVols == nil || len(podVols.Pending) == 0 || c.l.Capacities == nil || c.cfg.CapacityPublishGrace <= 0 {
		return nil, 0
	}
	now := c.now()
	for _, p := range youngClasses(podVols, now, c.cfg.CapacityPublishGrace) {
		missing, total := c.unpublished(p, nodes)
		if len(missing) == 0 || (len(missing) == total && !c.tracksCapacity()) {
			// None missing; or none published for a driver whose
			// capacity VolumeBinding does not track, which may have no
			// publisher at all.
			continue
		}
		left := p.Class.CreationTimestamp.Add(c.cfg.CapacityPublishGrace).Sub(now)
		sort.Strings(missing)
		example := missing
		if len(example) > 3 {
			example = example[:3]
		}
		return &Status{Reason: ReasonCapacityNotPublished, Message: fmt.Sprintf(
			"class %s was created %s ago and %d of its %d segments have no capacity object yet (%s): waiting up to %s more for them, so that the pod is not placed by which node published first",
			p.Class.Name, now.Sub(p.Class.CreationTimestamp.Time).Round(time.Second), len(missing), total,
			strings.Join(example, "; "), left.Round(time.Second))}, left
	}
	return nil, 0
}

// tracksCapacity reports whether the driver's CSIDriver has
// storageCapacity: true.
func (c *Core) tracksCapacity() bool {
	if c.l.CSIDrivers == nil {
		return false
	}
	d, err := c.l.CSIDrivers.Get(c.cfg.Driver)
	return err == nil && d.Spec.StorageCapacity != nil && *d.Spec.StorageCapacity
}

// youngClasses returns one pending claim per class of the pod created less
// than grace before now.
func youngClasses(podVols *PodVolumes, now time.Time, grace time.Duration) []PendingClaim {
	var out []PendingClaim
	seen := map[string]bool{}
	for _, p := range podVols.Pending {
		if seen[p.Class.Name] || p.Class.CreationTimestamp.IsZero() || now.Sub(p.Class.CreationTimestamp.Time) >= grace {
			continue
		}
		seen[p.Class.Name] = true
		out = append(out, p)
	}
	return out
}

// unpublished returns the segments of nodes that the class of p may use
// and that have no capacity object of it, and how many such segments there
// are in all.
func (c *Core) unpublished(p PendingClaim, nodes []*v1.Node) (missing []string, total int) {
	known := map[string]bool{}
	for _, node := range nodes {
		ns := c.nodeSegment(node)
		if ns.st != nil || !topology.MatchLabels(p.Class.AllowedTopologies, node.Labels) || c.filterLiveness(node.Name) != nil {
			continue
		}
		if _, done := known[ns.seg]; done {
			continue
		}
		_, ok := c.l.Capacities.Capacity(p.Class.Name, node.Labels)
		known[ns.seg] = ok
		if !ok {
			missing = append(missing, ns.seg)
		}
	}
	return missing, len(known)
}
