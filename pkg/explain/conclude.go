package explain

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Cause names a conclusion, for scripts (-o json).
type Cause string

// The causes, each with what would unblock the claim (see
// docs/troubleshooting.md).
const (
	// CauseBound: the claim is bound; the conclusion says what decided
	// its place.
	CauseBound Cause = "Bound"
	// CauseClassNotFound: the claim's StorageClass does not exist.
	CauseClassNotFound Cause = "ClassNotFound"
	// CauseNoProvisioner: no provisioner for the driver runs.
	CauseNoProvisioner Cause = "NoProvisioner"
	// CauseBadClassParameter: the provisioner refuses a class parameter.
	CauseBadClassParameter Cause = "BadClassParameter"
	// CauseMissingSecret: a secret the class names does not exist.
	CauseMissingSecret Cause = "MissingSecret"
	// CauseDriverInvalidArgument: the driver answered INVALID_ARGUMENT.
	CauseDriverInvalidArgument Cause = "DriverInvalidArgument"
	// CauseSegmentFull: the capacity of the segment(s) is too small.
	CauseSegmentFull Cause = "SegmentFull"
	// CauseNoDriverOnNode: the driver is not registered on the node(s).
	CauseNoDriverOnNode Cause = "NoDriverOnNode"
	// CauseDriverSilent: the driver's heartbeat on the node(s) expired.
	CauseDriverSilent Cause = "DriverSilent"
	// CauseNoAllowedSegment: allowedTopologies match no node of the driver.
	CauseNoAllowedSegment Cause = "NoAllowedSegment"
	// CauseAttachLimit: the node's attach limit for the driver is reached.
	CauseAttachLimit Cause = "AttachLimitReached"
	// CauseSourceOutOfReach: the source of a clone, or of a restore that
	// topology.CopyReach narrows, cannot be reached from where the claim may
	// go.
	CauseSourceOutOfReach Cause = "SourceOutOfReach"
	// CauseNodeUnsuitable: the scheduler filter rejects the node(s) for
	// another reason (its message says which).
	CauseNodeUnsuitable Cause = "NodeUnsuitable"
	// CauseWaitingForPod: delayed binding, and no pod uses the claim.
	CauseWaitingForPod Cause = "WaitingForPod"
	// CauseWaitingForScheduler: a pod uses the claim, nodes fit, and the
	// scheduler has not placed it yet.
	CauseWaitingForScheduler Cause = "WaitingForScheduler"
	// CauseUndetermined: the reads RBAC refused hide what stops the claim.
	CauseUndetermined Cause = "Undetermined"
	// CauseProvisioning: nothing stops the claim; the volume is on its way.
	CauseProvisioning Cause = "Provisioning"
)

func (e *explainer) set(c Cause, format string, args ...any) {
	e.cause, e.conclusion = c, fmt.Sprintf(format, args...)
}

func (e *explainer) conclude() {
	s := e.s
	switch {
	case s.claim.Status.Phase == v1.ClaimBound:
		e.concludeBound()
	case s.class == nil:
		e.set(CauseClassNotFound, "class %q does not exist: create it, or recreate the claim with an existing class", claimClass(s.claim))
	case e.provState == provStopped:
		e.set(CauseNoProvisioner, "no provisioner for %s is running (its leader Lease %s expired, and nothing of a provisioner came since): start csi-provisioner (check its Deployment and logs)",
			s.class.Provisioner, s.leader.Namespace+"/"+s.leader.Name)
	case e.concludeClassEvent():
	case e.concludeSelected():
	case e.concludeDriverEvent():
	case len(e.segments) == 0 && e.s.read[readCSINodes]:
		e.set(CauseNoDriverOnNode, "no node has driver %s: install its node plugin", s.class.Provisioner)
	case len(e.allowed) == 0 && e.s.read[readCSINodes]:
		e.set(CauseNoAllowedSegment, "allowedTopologies of class %s (%s) match no node with driver %s (its segments: %s): fix the class's allowedTopologies, or install the node plugin on nodes there",
			s.class.Name, termsString(s.class.AllowedTopologies), s.class.Provisioner, segString(e.segments))
	case e.concludeFilter():
	case e.provState == provUnknown && s.leader == nil && e.anyRead("list leader lease") && e.latestSign() == nil && !e.provisionerSpoke():
		e.set(CauseNoProvisioner, "no provisioner for %s seems to run: no leader Lease %s and no Event from it on the claim: start csi-provisioner (with --leader-election, this tool can tell for sure)",
			s.class.Provisioner, contract.LeaderLeaseName(s.class.Provisioner))
	case isDelayed(s.class) && len(s.pods) == 0:
		e.set(CauseWaitingForPod, "the claim waits for its first consumer: create a pod that uses it")
	case !s.read[readNodes] || !s.read[readCSINodes]:
		e.set(CauseUndetermined, "what stops the claim is not known: nodes or CSINodes could not be read (see the access lines for the rules that would allow it)")
	case isDelayed(s.class) && s.claim.Annotations[storagehelpers.AnnSelectedNode] == "":
		e.set(CauseWaitingForScheduler, "nodes fit; the scheduler has not placed pod %s/%s yet: check its FailedScheduling Events (other constraints: CPU, memory, affinity)",
			s.pods[0].Namespace, s.pods[0].Name)
	default:
		e.set(CauseProvisioning, "nothing stops the claim: the provisioner is creating its volume")
	}
}

func isDelayed(sc *storagev1.StorageClass) bool {
	return sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

func (e *explainer) concludeBound() {
	pv := e.s.volume
	if pv == nil {
		e.set(CauseBound, "bound to PV %s (not readable here)", e.s.claim.Spec.VolumeName)
		return
	}
	decision := "no ProvisioningSucceeded Event left on the claim (Events expire after an hour)"
	for i := len(e.s.events) - 1; i >= 0; i-- {
		if ev := e.s.events[i]; ev.Reason == contract.ReasonProvisioningSucceeded {
			// The placement the provisioner decided; another provisioner
			// (upstream's) says only what its message says.
			decision = ev.Annotations[contract.AnnPlacement]
			if decision == "" {
				decision = ev.Message
			}
			break
		}
	}
	e.set(CauseBound, "bound to PV %s, reachable from %s; placed by: %s", pv.Name, nodeAffinityString(pv), decision)
}

func nodeAffinityString(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return "every node"
	}
	var terms []string
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		var exprs []string
		for _, x := range t.MatchExpressions {
			exprs = append(exprs, fmt.Sprintf("%s %s (%s)", x.Key, strings.ToLower(string(x.Operator)), strings.Join(x.Values, ",")))
		}
		terms = append(terms, strings.Join(exprs, " and "))
	}
	return strings.Join(terms, " or ")
}

// lastFailure is the newest ProvisioningFailed Event when it is newer than
// every ProvisioningSucceeded one.
func (e *explainer) lastFailure() *v1.Event {
	for i := len(e.s.events) - 1; i >= 0; i-- {
		switch e.s.events[i].Reason {
		case contract.ReasonProvisioningFailed:
			return &e.s.events[i]
		case contract.ReasonProvisioningSucceeded:
			return nil
		}
	}
	return nil
}

// provisionerSpoke reports whether a provisioner posted an Event on the
// claim (the persistentvolume-controller's own do not count).
func (e *explainer) provisionerSpoke() bool {
	for _, ev := range e.s.events {
		switch ev.Reason {
		case contract.ReasonProvisioning, contract.ReasonProvisioningSucceeded, contract.ReasonProvisioningFailed:
			return true
		}
	}
	return false
}

// concludeClassEvent concludes from the newest provisioning failure when
// the provisioner refused the class or its secret (contract.AnnRefusal):
// no node would do better.
func (e *explainer) concludeClassEvent() bool {
	ev := e.lastFailure()
	if ev == nil {
		return false
	}
	class := e.s.class.Name
	switch contract.Refusal(ev.Annotations[contract.AnnRefusal]) {
	case contract.RefusalInvalidParameter, contract.RefusalInvalidSecretTemplate:
		e.set(CauseBadClassParameter, "class %s has a bad parameter (%s): fix it in a new class (parameters cannot be edited) and recreate the claim with it",
			class, ev.Message)
	case contract.RefusalSecretNotFound:
		secret := "the secret"
		if ref := ev.Annotations[contract.AnnSecret]; ref != "" {
			secret = "secret " + ref
		}
		e.set(CauseMissingSecret, "%s, which class %s names, does not exist: create it (%s)", secret, class, ev.Message)
	default:
		return false
	}
	return true
}

// concludeDriverEvent concludes from the newest provisioning failure when
// the driver refused the request (contract.AnnDriverCode), or said that the
// selected node's segment is full (contract.AnnHandBack).
func (e *explainer) concludeDriverEvent() bool {
	ev := e.lastFailure()
	if ev == nil {
		return false
	}
	switch {
	case ev.Annotations[contract.AnnDriverCode] == codes.InvalidArgument.String():
		e.set(CauseDriverInvalidArgument, "driver %s refused CreateVolume with INVALID_ARGUMENT (%s): fix what the driver rejects in class %s's parameters or the claim",
			e.s.class.Provisioner, ev.Message, e.s.class.Name)
	case handBack(*ev) == contract.HandBackNoCapacity && e.s.claim.Annotations[storagehelpers.AnnSelectedNode] != "":
		e.set(CauseSegmentFull, "the driver reports the selected node's segment full (ResourceExhausted): free space there, add capacity, or let the scheduler pick another segment")
	default:
		return false
	}
	return true
}

// concludeSelected concludes from the filter's verdict on the selected node.
func (e *explainer) concludeSelected() bool {
	node := e.s.claim.Annotations[storagehelpers.AnnSelectedNode]
	if node == "" {
		return false
	}
	st, ok := e.filter[node]
	if !ok || st == nil {
		return false
	}
	return e.concludeStatus(st, node)
}

// concludeFilter concludes when no node the pod may use fits: from the
// reason most nodes give (ties broken by the order of reasonOrder).
func (e *explainer) concludeFilter() bool {
	counts := map[scheduler.Reason]int{}
	var first = map[scheduler.Reason]string{}
	for _, n := range sortedKeys(e.filter) {
		st := e.filter[n]
		if st == nil {
			return false
		}
		counts[st.Reason]++
		if _, ok := first[st.Reason]; !ok {
			first[st.Reason] = n
		}
	}
	if len(counts) == 0 {
		return false
	}
	reasons := make([]scheduler.Reason, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if counts[reasons[i]] != counts[reasons[j]] {
			return counts[reasons[i]] > counts[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	n := first[reasons[0]]
	return e.concludeStatus(e.filter[n], n)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// concludeStatus turns a filter verdict on a node into the conclusion.
func (e *explainer) concludeStatus(st *scheduler.Status, node string) bool {
	driver := e.s.class.Provisioner
	others := ""
	if n := len(e.filter); n > 1 {
		others = fmt.Sprintf(" (and the pod's other %d candidate node(s) are rejected too)", n-1)
		for _, v := range e.filter {
			if v == nil {
				others = ""
			}
		}
	}
	switch st.Reason {
	case scheduler.ReasonDriverNotRegistered:
		e.set(CauseNoDriverOnNode, "no driver %s on node %s%s: install the node plugin there, or keep the pod off it", driver, node, others)
	case scheduler.ReasonDriverNotLive:
		e.set(CauseDriverSilent, "driver %s on node %s is silent (%s)%s: restart its node plugin there", driver, node, st.Message, others)
	case scheduler.ReasonOutsideAllowedTopologies:
		e.set(CauseNoAllowedSegment, "node %s is outside the allowedTopologies of class %s (%s)%s: let the pod go to an allowed segment (%s) or widen allowedTopologies",
			node, e.s.class.Name, termsString(e.s.class.AllowedTopologies), others, segString(e.allowed))
	case scheduler.ReasonInsufficientCapacity:
		e.set(CauseSegmentFull, "segment full: %s%s: free space there, add capacity, or let the pod go to another segment", st.Message, others)
	case scheduler.ReasonVolumeLimitExceeded:
		e.set(CauseAttachLimit, "attach limit reached on node %s: %s%s: move pods with volumes of %s off it, or let the pod go elsewhere", node, st.Message, others, driver)
	case scheduler.ReasonDataSourceUnreachable:
		e.set(CauseSourceOutOfReach, "the copy's source is out of reach of node %s: %s%s: run the pod where the source is reachable, or set annotation %s=%s on the class if the driver can copy anywhere", node, st.Message, others,
			topology.AnnCopyPlacement, topology.CopyAnywhere)
	default:
		e.set(CauseNodeUnsuitable, "node %s is rejected: %s%s", node, st.String(), others)
	}
	return true
}
