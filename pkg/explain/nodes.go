package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// sourceLine says whether a clone's or a restore's source can be reached
// from an allowed segment, by topology.CopyReach: the rule the provisioner
// and the filter share.
func (e *explainer) sourceLine() {
	what := ""
	restore := false
	if src := cloneSource(e.s.claim); src != "" {
		what = "clones claim " + src
	} else if snap := restoreSource(e.s.claim); snap != "" {
		restore = true
		switch {
		case e.s.snapshot == nil && e.s.read[readSnapshot]:
			e.add("source", Fail, "restores VolumeSnapshot %s, which does not exist in %s", snap, e.s.claim.Namespace)
			return
		case e.s.snapshot == nil:
			e.add("source", Unknown, "restores VolumeSnapshot %s, which could not be read: where it may be restored is not judged", snap)
			return
		case e.s.snapshot.Spec.Source.PersistentVolumeClaimName == nil:
			e.add("source", Pass, "restores VolumeSnapshot %s of a pre-provisioned content: the driver decides where", snap)
			return
		}
		what = fmt.Sprintf("restores VolumeSnapshot %s of claim %s", snap, *e.s.snapshot.Spec.Source.PersistentVolumeClaimName)
	}
	placement, err := topology.ClassCopyPlacement(e.s.class)
	switch {
	case what == "":
		return
	case err != nil:
		e.add("source", Fail, "%s: %v", what, err)
	case e.s.source == nil:
		if restore {
			e.add("source", Pass, "%s, which no longer exists: the driver decides where", what)
			return
		}
		e.add("source", Fail, "%s, which does not exist in %s", what, e.s.claim.Namespace)
	case e.s.sourceVolume == nil:
		e.add("source", Unknown, "%s, whose volume is not bound or could not be read", what)
	default:
		reach, basis := topology.CopyReach(topology.Copy{Restore: restore, Affinity: e.s.sourceVolume.Spec.NodeAffinity, Placement: placement},
			topology.CSINodeKeys(e.csiNode, e.s.class.Provisioner))
		if !reach.Constrained() {
			e.add("source", Pass, "%s (PV %s, reachable from %s): %s", what, e.s.sourceVolume.Name,
				topology.Reach{Affinity: e.s.sourceVolume.Spec.NodeAffinity}, basis.Explain())
			return
		}
		in := reach.FilterSegments(e.allowed)
		if len(in) == 0 {
			e.add("source", Fail, "%s, whose volume is reachable only from %s (%s): no allowed segment is", what, reach, basis.Explain())
			return
		}
		e.add("source", Pass, "%s, reachable from %s (%s): allowed segment(s) %s", what, reach, basis.Explain(), segString(in))
	}
}

// csiNode is the CSINode of that name that was read, or nil.
func (e *explainer) csiNode(name string) *storagev1.CSINode {
	for _, n := range e.s.csiNodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// capacityLines give the published capacity of each allowed segment, its
// age and the reservations in flight there.
func (e *explainer) capacityLines() {
	if e.caps == nil {
		if !e.s.read[readCapacities] {
			e.add("capacity", Unknown, "CSIStorageCapacity objects could not be listed: capacity not checked")
		}
		return
	}
	class := e.s.class.Name
	need := e.s.claim.Spec.Resources.Requests[v1.ResourceStorage]
	rep := e.representatives()
	for i, seg := range e.allowed {
		if i == maxNodeLines {
			e.add("capacity", Info, "… and %d more segment(s)", len(e.allowed)-i)
			break
		}
		c, ok := e.caps.Capacity(class, rep[seg.String()].Labels)
		if !ok {
			e.add("capacity", Info, "segment %s: no capacity published for class %s", seg, class)
			continue
		}
		reserved := e.core.Ledger().Reserved(seg.String(), class, []types.UID{e.s.claim.UID})
		text := fmt.Sprintf("segment %s: %s free for class %s (%s, published %s ago), %s reserved in flight", seg,
			byteSize(c.Free), class, c.Object, e.capacityAge(c.Object), byteSize(reserved))
		st := Pass
		if c.Free-reserved < need.Value() || (c.MaxVolume != nil && *c.MaxVolume < need.Value()) {
			st = Fail
			text += "; the claim needs " + need.String()
		}
		e.add("capacity", st, "%s", text)
	}
}

func byteSize(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// representatives maps each segment to one node of it.
func (e *explainer) representatives() map[string]*v1.Node {
	out := map[string]*v1.Node{}
	for _, n := range e.s.nodes {
		for _, seg := range e.allowed {
			if _, ok := out[seg.String()]; ok {
				continue
			}
			if p, ok := topology.Segment(n.Labels).Project(seg.Keys()); ok && p.Equal(seg) {
				out[seg.String()] = n
			}
		}
	}
	return out
}

// capacityAge is how long ago the object was last written (its newest
// managedFields time, else its creation).
func (e *explainer) capacityAge(key string) string {
	for _, c := range e.s.capacities {
		if c.Namespace+"/"+c.Name != key {
			continue
		}
		t := c.CreationTimestamp.Time
		for _, m := range c.ManagedFields {
			if m.Time != nil && m.Time.After(t) {
				t = m.Time.Time
			}
		}
		return ago(e.now, t)
	}
	return "?"
}

// perNodeLines give the filter's summary and, for the selected node and
// up to maxNodeLines others, the driver's registration, heartbeat, attach
// limit and the filter's verdict.
func (e *explainer) perNodeLines() {
	if !e.s.read[readNodes] {
		e.add("filter", Unknown, "nodes could not be listed: the scheduler filter was not run")
		return
	}
	if len(e.filter) == 0 {
		e.add("filter", Info, "scheduler filter not run: %s", e.noFilterReason())
		return
	}
	names := make([]string, 0, len(e.filter))
	reasons := map[scheduler.Reason]int{}
	fit := 0
	for n, st := range e.filter {
		names = append(names, n)
		if st == nil {
			fit++
		} else {
			reasons[st.Reason]++
		}
	}
	sel := e.s.claim.Annotations[storagehelpers.AnnSelectedNode]
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == sel) != (names[j] == sel) {
			return names[i] == sel
		}
		return names[i] < names[j]
	})
	st := Pass
	if fit == 0 {
		st = Fail
	}
	e.add("filter", st, "scheduler filter: %d of %d node(s) the pod may use fit%s", fit, len(names), reasonCounts(reasons))
	for i, n := range names {
		if i == maxNodeLines {
			e.add("node", Info, "… and %d more node(s)", len(names)-i)
			break
		}
		e.nodeDetail(n)
	}
}

func (e *explainer) noFilterReason() string {
	if !isDelayed(e.s.class) {
		return "immediate binding, no node is chosen for the claim"
	}
	return "no node matches the pod's node selector and required node affinity"
}

func reasonCounts(m map[scheduler.Reason]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for r, n := range m {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return "; rejected: " + strings.Join(parts, ", ")
}

func (e *explainer) nodeDetail(name string) {
	driver := e.s.class.Provisioner
	var csiNode *storagev1.CSINode
	for _, c := range e.s.csiNodes {
		if c.Name == name {
			csiNode = c
		}
	}
	var facts []string
	if driverEntry(csiNode, driver) == nil {
		facts = append(facts, "driver not registered")
	} else {
		facts = append(facts, "driver registered")
	}
	if e.live != nil {
		switch live, silent, known := e.live.Live(driver, name, e.now); {
		case !known:
			facts = append(facts, "no heartbeat Lease")
		case live:
			facts = append(facts, "driver live")
		default:
			facts = append(facts, fmt.Sprintf("driver silent for %s", silent.Truncate(time.Second)))
		}
	}
	if e.counter != nil {
		if _, usage, limit, err := e.counter.Fits(name, 0); err == nil && limit != nil {
			facts = append(facts, fmt.Sprintf("%d of %d attach slot(s) used", usage.Attached+usage.Pending, *limit))
		}
	}
	st, verdict := Pass, "fits"
	if v := e.filter[name]; v != nil {
		st, verdict = Fail, v.String()
	}
	e.add("node", st, "node %s: %s; filter: %s", name, strings.Join(facts, ", "), verdict)
}

// inFlightLine says whether the provisioner's in-flight record is on the
// claim: a CreateVolume call may have made a volume that has no PV yet. A
// PV that refers to the claim (by UID) is found whatever its name: the
// provisioner names PVs after their volumes, <--volume-name-prefix>-<UID>,
// which explain cannot know.
func (e *explainer) inFlightLine() {
	pv := e.claimPV()
	for _, f := range e.s.claim.Finalizers {
		if f != contract.InFlightRecordFinalizer {
			continue
		}
		if pv != nil {
			e.add("in-flight", Info, "in-flight record present; the volume's PV %s exists, and the record goes once the provisioner sees it", pv.Name)
			return
		}
		e.add("in-flight", Info, "in-flight record present: the provisioner called CreateVolume and the volume has no PV yet")
		return
	}
	if pv != nil && e.s.claim.Spec.VolumeName == "" {
		e.add("in-flight", Info, "no in-flight record; PV %s exists for the claim, not bound yet", pv.Name)
		return
	}
	e.add("in-flight", Info, "no in-flight record: no CreateVolume outstanding")
}

// claimPV is the PV the claim is bound to, or else a PV whose claimRef
// names the claim by UID (made, not bound yet), nil when none was read.
func (e *explainer) claimPV() *v1.PersistentVolume {
	if e.s.volume != nil {
		return e.s.volume
	}
	for _, pv := range e.s.volumes {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.UID == e.s.claim.UID {
			return pv
		}
	}
	return nil
}

// eventLines give the last provisioning Events with the driver's code
// (contract.AnnDriverCode).
func (e *explainer) eventLines() {
	var shown []v1.Event
	for _, ev := range e.s.events {
		if ev.Source.Component == "persistentvolume-controller" && ev.Reason != contract.ReasonProvisioningFailed {
			continue
		}
		shown = append(shown, ev)
	}
	if len(shown) > 3 {
		shown = shown[len(shown)-3:]
	}
	for _, ev := range shown {
		st := Info
		if ev.Type == v1.EventTypeWarning {
			st = Fail
		}
		code := ""
		if c := ev.Annotations[contract.AnnDriverCode]; c != "" {
			code = " [driver: " + c + "]"
		}
		e.add("events", st, "%s ago %s (x%d)%s: %s", ago(e.now, eventTime(ev).Time), ev.Reason, max(ev.Count, 1), code, ev.Message)
	}
}

func (e *explainer) deniedLines() {
	for _, d := range e.s.denied {
		e.add("access", Unknown, "could not %s; allowed by the rule %s", d.What, d.Rule)
	}
}
