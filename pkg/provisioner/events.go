package provisioner

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// Event reasons the provisioning library posts on claims.
const (
	reasonProvisioning          = contract.ReasonProvisioning
	reasonProvisioningSucceeded = contract.ReasonProvisioningSucceeded
	reasonProvisioningFailed    = contract.ReasonProvisioningFailed
)

// DecisionLog carries the topology decision of a successful provision from
// Provision to the claim's ProvisioningSucceeded Event, so that one Event per
// volume tells both that and where it was provisioned, and why an attempt
// failed to its ProvisioningFailed Event, as the annotations of
// pkg/contract (RecordFailure). Safe for concurrent use.
type DecisionLog struct {
	mu        sync.Mutex
	decisions map[types.UID]Decision
	// failures wait for their Events; swept when there are more than
	// sweepAt claims.
	failures map[types.UID][]failureNote
	sweepAt  int
	clock    clock.PassiveClock
}

// Decision is what a claim's ProvisioningSucceeded Event says, or that it
// is not posted.
type Decision struct {
	// Placement is the topology decision, appended to the Event's message.
	Placement string
	// VolumeDeleted drops the Event: the new volume was deleted because
	// its PV name was taken (the VolumeNameTaken Event says so).
	VolumeDeleted bool
	// NameTaken drops the Event: the PV name was held by another claim's
	// PV of the same volume, so no PV was made (VolumeNameTaken says so).
	NameTaken bool
}

// NewDecisionLog returns an empty DecisionLog.
func NewDecisionLog() *DecisionLog {
	return &DecisionLog{decisions: map[types.UID]Decision{}, failures: map[types.UID][]failureNote{},
		sweepAt: minSweep, clock: clock.RealClock{}}
}

// Record stores the placement decision for a claim, replacing an earlier
// entry.
func (l *DecisionLog) Record(uid types.UID, placement string) {
	l.put(uid, Decision{Placement: placement})
}

// RecordVolumeDeleted records that the claim's new volume was deleted, so
// that the library's ProvisioningSucceeded Event for it is dropped.
func (l *DecisionLog) RecordVolumeDeleted(uid types.UID) {
	l.put(uid, Decision{VolumeDeleted: true})
}

// RecordNameTaken records that the claim's PV was not made because another
// claim's PV holds its name and volume, so that the library's
// ProvisioningSucceeded Event for it is dropped.
func (l *DecisionLog) RecordNameTaken(uid types.UID) {
	l.put(uid, Decision{NameTaken: true})
}

func (l *DecisionLog) put(uid types.UID, d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.decisions[uid] = d
}

// Take returns and forgets the entry for a claim.
func (l *DecisionLog) Take(uid types.UID) (Decision, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.decisions[uid]
	delete(l.decisions, uid)
	return d, ok
}

// Len returns how many decisions wait for their Event.
func (l *DecisionLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.decisions)
}

// WithEventSink returns a clientset for the provisioning library whose Events
// go through events (a clientset with its own client-side rate limit, so
// Events neither starve nor are starved by the work) and are trimmed to one
// per provisioned volume: the library's "Provisioning" Event is dropped and
// its "ProvisioningSucceeded" Event carries the decision from log. Every
// other call goes to client.
func WithEventSink(client, events kubernetes.Interface, log *DecisionLog) kubernetes.Interface {
	return &eventSinkClient{
		Interface: client,
		core:      &eventSinkCoreV1{CoreV1Interface: client.CoreV1(), events: events.CoreV1(), log: log},
	}
}

type eventSinkClient struct {
	kubernetes.Interface
	core corev1client.CoreV1Interface
}

func (c *eventSinkClient) CoreV1() corev1client.CoreV1Interface { return c.core }

type eventSinkCoreV1 struct {
	corev1client.CoreV1Interface
	events corev1client.EventsGetter
	log    *DecisionLog
}

func (c *eventSinkCoreV1) Events(namespace string) corev1client.EventInterface {
	return &trimmedEvents{EventInterface: c.events.Events(namespace), log: c.log}
}

// trimmedEvents implements the event sink methods the library's broadcaster
// uses (EventSinkImpl) on top of a real EventInterface.
type trimmedEvents struct {
	corev1client.EventInterface
	log *DecisionLog
}

func (e *trimmedEvents) rewrite(ev *v1.Event) (drop bool) {
	switch ev.Reason {
	case reasonProvisioning:
		return true
	case reasonProvisioningSucceeded:
		d, ok := e.log.Take(ev.InvolvedObject.UID)
		if ok && (d.VolumeDeleted || d.NameTaken) {
			return true // no PV of the claim's volume; VolumeNameTaken says why
		}
		if ok && d.Placement != "" {
			ev.Message += ": " + d.Placement
			annotate(ev, map[string]string{contract.AnnPlacement: d.Placement})
		}
	case reasonProvisioningFailed:
		annotate(ev, e.log.takeFailure(ev.InvolvedObject.UID, ev.Message))
	}
	return false
}

// repeated forgets the failure of an Event posted again (a PATCH of its
// count): the Event got the failure's annotations when it was created.
func (e *trimmedEvents) repeated(ev *v1.Event) {
	if ev.Reason == reasonProvisioningFailed {
		e.log.takeFailure(ev.InvolvedObject.UID, ev.Message)
	}
}

func (e *trimmedEvents) CreateWithEventNamespace(ev *v1.Event) (*v1.Event, error) {
	if e.rewrite(ev) {
		return ev, nil
	}
	return e.EventInterface.CreateWithEventNamespace(ev)
}

func (e *trimmedEvents) CreateWithEventNamespaceWithContext(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	if e.rewrite(ev) {
		return ev, nil
	}
	return e.EventInterface.CreateWithEventNamespaceWithContext(ctx, ev)
}

func (e *trimmedEvents) UpdateWithEventNamespace(ev *v1.Event) (*v1.Event, error) {
	if ev.Reason == reasonProvisioning {
		return ev, nil
	}
	return e.EventInterface.UpdateWithEventNamespace(ev)
}

func (e *trimmedEvents) UpdateWithEventNamespaceWithContext(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	if ev.Reason == reasonProvisioning {
		return ev, nil
	}
	return e.EventInterface.UpdateWithEventNamespaceWithContext(ctx, ev)
}

func (e *trimmedEvents) PatchWithEventNamespace(ev *v1.Event, data []byte) (*v1.Event, error) {
	if ev.Reason == reasonProvisioning {
		return ev, nil
	}
	e.repeated(ev)
	return e.EventInterface.PatchWithEventNamespace(ev, data)
}

func (e *trimmedEvents) PatchWithEventNamespaceWithContext(ctx context.Context, ev *v1.Event, data []byte) (*v1.Event, error) {
	if ev.Reason == reasonProvisioning {
		return ev, nil
	}
	e.repeated(ev)
	return e.EventInterface.PatchWithEventNamespaceWithContext(ctx, ev, data)
}
