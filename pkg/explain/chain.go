package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// maxNodeLines bounds the per-node lines; the filter line counts the rest.
const maxNodeLines = 10

// explainer builds the chain and the conclusion of one snapshot.
type explainer struct {
	s   *snapshot
	now time.Time
	// core and filter are the scheduler core and its verdict per node the
	// pod may use (nil: fits).
	core    *scheduler.Core
	live    *heartbeat.Liveness
	counter *limits.Counter
	caps    scheduler.CapacitySource
	filter  map[string]*scheduler.Status
	// segments are the driver's segments; allowed those the class allows.
	segments, allowed []topology.Segment
	// provState is what the evidence says of the driver's provisioner
	// (provisionerLine).
	provState  provState
	lines      []Line
	cause      Cause
	conclusion string
}

func (e *explainer) add(step string, st State, format string, args ...any) {
	e.lines = append(e.lines, Line{Step: step, State: st, Text: fmt.Sprintf(format, args...)})
}

func (e *explainer) run() error {
	e.claimLine()
	if e.s.class == nil {
		e.add("class", Fail, "class %q does not exist", claimClass(e.s.claim))
		e.deniedLines()
		e.conclude()
		return nil
	}
	e.classLine()
	e.provisionerLine()
	e.nodeLine()
	if e.s.claim.Status.Phase != v1.ClaimBound {
		if err := e.runFilter(); err != nil {
			return err
		}
		e.segmentLines()
		e.sourceLine()
		e.capacityLines()
		e.perNodeLines()
	}
	e.inFlightLine()
	e.eventLines()
	e.deniedLines()
	e.conclude()
	return nil
}

func (e *explainer) claimLine() {
	c := e.s.claim
	size := c.Spec.Resources.Requests[v1.ResourceStorage]
	created := ""
	if !c.CreationTimestamp.IsZero() {
		created = ", created " + ago(e.now, c.CreationTimestamp.Time) + " ago"
	}
	e.add("claim", Info, "claim %s/%s is %s, requests %s%s", c.Namespace, c.Name, phaseOf(c), size.String(), created)
}

func phaseOf(c *v1.PersistentVolumeClaim) string {
	if c.DeletionTimestamp != nil {
		return "being deleted"
	}
	if c.Status.Phase == "" {
		return string(v1.ClaimPending)
	}
	return string(c.Status.Phase)
}

func (e *explainer) classLine() {
	sc := e.s.class
	mode := storagev1.VolumeBindingImmediate
	if sc.VolumeBindingMode != nil {
		mode = *sc.VolumeBindingMode
	}
	e.add("class", Pass, "class %s: driver %s, binding mode %s, %d parameter(s)", sc.Name, sc.Provisioner, mode, len(sc.Parameters))
}

func (e *explainer) anyRead(prefix string) bool {
	for k := range e.s.read {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// nodeLine says where the claim went: the selected node and its history
// from the Events, or the bound PV's node affinity.
func (e *explainer) nodeLine() {
	c := e.s.claim
	if pv := e.s.volume; c.Status.Phase == v1.ClaimBound && pv != nil {
		e.add("selected", Pass, "bound to PV %s, reachable from %s", pv.Name, topology.Reach{Affinity: pv.Spec.NodeAffinity})
		return
	}
	var history []string
	for _, ev := range e.s.events {
		if r := handBack(ev); r != "" {
			history = append(history, fmt.Sprintf("handed back at %s (%s)", eventTime(ev).UTC().Format(time.TimeOnly), r))
		}
	}
	hist := ""
	if len(history) > 0 {
		hist = "; before: " + strings.Join(history, ", ")
	}
	node := c.Annotations[storagehelpers.AnnSelectedNode]
	mode := e.s.class.VolumeBindingMode
	switch {
	case node != "":
		e.add("selected", Info, "selected node %s%s", node, hist)
	case mode != nil && *mode == storagev1.VolumeBindingWaitForFirstConsumer && len(e.s.pods) == 0:
		e.add("selected", Info, "no node selected: the class waits for the first consumer and no pod uses the claim%s", hist)
	case mode != nil && *mode == storagev1.VolumeBindingWaitForFirstConsumer:
		e.add("selected", Fail, "no node selected: pod %s/%s uses the claim but is not scheduled%s", e.s.pods[0].Namespace, e.s.pods[0].Name, hist)
	default:
		e.add("selected", Info, "immediate binding: the provisioner chooses the segment%s", hist)
	}
}

// handBack is why the provisioner handed the claim back to the scheduler
// in a ProvisioningFailed Event (its contract.AnnHandBack annotation), ""
// when it did not.
func handBack(ev v1.Event) contract.HandBack {
	if ev.Reason != contract.ReasonProvisioningFailed {
		return ""
	}
	return contract.HandBack(ev.Annotations[contract.AnnHandBack])
}

func (e *explainer) runFilter() error {
	st, err := newStores(e.s)
	if err != nil {
		return err
	}
	if e.core, e.live, e.counter, e.caps, err = newCore(e.s, st, e.now); err != nil {
		return err
	}
	claims := e.s.allClaims
	if !e.s.read[readClaims] {
		claims = e.s.nsClaims
	}
	nodes := map[string]*v1.Node{}
	for _, n := range e.s.nodes {
		nodes[n.Name] = n
	}
	for _, c := range claims {
		if n := c.Annotations[storagehelpers.AnnSelectedNode]; n != "" {
			e.core.ObserveClaim(c, nodes[n])
		}
	}
	e.filter, err = verdicts(e.s, e.core)
	return err
}

// segmentLines computes the driver's segments and those the class allows:
// a node contributes its segment when its CSINode lists the driver and it
// has a label for each of the driver's keys (topology.DriverKeys).
func (e *explainer) segmentLines() {
	driver := e.s.class.Provisioner
	csiNodes := map[string]*storagev1.CSINode{}
	for _, n := range e.s.csiNodes {
		csiNodes[n.Name] = n
	}
	all, allowed := map[string]topology.Segment{}, map[string]topology.Segment{}
	for _, n := range e.s.nodes {
		keys, err := topology.DriverKeys(csiNodes[n.Name], driver)
		if err != nil || driverEntry(csiNodes[n.Name], driver) == nil {
			continue
		}
		seg, ok := topology.Segment(n.Labels).Project(keys)
		if !ok {
			continue
		}
		all[seg.String()] = seg
		if topology.MatchLabels(e.s.class.AllowedTopologies, n.Labels) {
			allowed[seg.String()] = seg
		}
	}
	e.segments, e.allowed = sorted(all), sorted(allowed)
	switch {
	case !e.s.read[readNodes] || !e.s.read[readCSINodes]:
		e.add("segments", Unknown, "segments not computed: nodes or CSINodes could not be listed")
	case len(e.segments) == 0:
		e.add("segments", Fail, "no node has driver %s registered with its topology labels", driver)
	case len(e.allowed) == 0:
		e.add("segments", Fail, "allowedTopologies of class %s (%s) match none of the driver's %d segment(s): %s",
			e.s.class.Name, termsString(e.s.class.AllowedTopologies), len(e.segments), segString(e.segments))
	default:
		e.add("segments", Pass, "%d of the driver's %d segment(s) allowed by class %s: %s", len(e.allowed), len(e.segments),
			e.s.class.Name, segString(e.allowed))
	}
}

func sorted(m map[string]topology.Segment) []topology.Segment {
	out := make([]topology.Segment, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func segString(segs []topology.Segment) string {
	parts := make([]string, 0, len(segs))
	for i, s := range segs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("… %d more", len(segs)-i))
			break
		}
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ", ")
}

func termsString(terms []v1.TopologySelectorTerm) string {
	var out []string
	for _, t := range terms {
		var exprs []string
		for _, x := range t.MatchLabelExpressions {
			exprs = append(exprs, fmt.Sprintf("%s in (%s)", x.Key, strings.Join(x.Values, ",")))
		}
		out = append(out, strings.Join(exprs, " and "))
	}
	if len(out) == 0 {
		return "none: every segment"
	}
	return strings.Join(out, " or ")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Truncate(time.Second).String()
}
