package provisioner

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// libraryClient is the clientset the provisioning library
// (sig-storage-lib-external-provisioner) is given: every call of the library
// goes to the API as the library makes it, but these:
//
//	library call                          what we do instead
//	------------------------------------  ---------------------------------------------------------------
//	PersistentVolumes().Create that       (record on) resolved, not taken for success (upstream
//	returns AlreadyExists                 external-provisioner #1469): the existing PV is read; if it
//	                                      holds this very volume for this claim and is not going away,
//	                                      the create is done; if it holds the volume for another claim,
//	                                      nothing is deleted (VolumeNameTaken Event); else the new
//	                                      volume is DELETED (VolumeNameTaken Event) and the library is
//	                                      told the PV exists; a failed DeleteVolume is an error, so the
//	                                      library retries the create and the resolution with it
//	                                      (inflight.NameGuard; the volume is deleted by Provisioner.delete).
//	PersistentVolumeClaims(ns).Update     (record on) sent as a PATCH of the claim's UID that removes the
//	without selected-node (the            annotation (with node deployment, or when no volume of the
//	library's reschedule)                 claim's name exists, the in-flight record too, and node
//	                                      deployment's node label); an UPDATE of the API's current claim
//	                                      where RBAC refuses the PATCH (inflight.ClaimWriter).
//	Events(ns) create, update, patch      (event sink) through their own clientset; "Provisioning"
//	                                      dropped; "ProvisioningSucceeded" gets the placement decision
//	                                      of DecisionLog appended, or is dropped when DecisionLog says
//	                                      the new volume was deleted or its name taken.
//
// withRecordGuard makes the first two rows, WithEventSink the third; the
// Controller stacks both. DecisionLog, the side channel keyed by claim UID
// from Provision to the Event sink, is below. Every other call (the
// library's claim and PV reads, PV updates and deletes) goes to the API as
// made. Safe for concurrent use.
type libraryClient struct {
	kubernetes.Interface
	core corev1client.CoreV1Interface
}

// CoreV1 returns the intercepting core client.
func (c *libraryClient) CoreV1() corev1client.CoreV1Interface { return c.core }

// libraryCoreV1 is libraryClient's core client. p set: the record guard;
// events set: the event sink.
type libraryCoreV1 struct {
	corev1client.CoreV1Interface
	// p and recorder make the record guard (p nil: off).
	p        *Provisioner
	recorder record.EventRecorder
	// events and log make the event sink (events nil: off).
	events corev1client.EventsGetter
	log    *DecisionLog
}

// withRecordGuard returns client with the record guard of p (the first two
// rows of libraryClient), posting its Events with recorder.
func withRecordGuard(client kubernetes.Interface, p *Provisioner, recorder record.EventRecorder) kubernetes.Interface {
	return &libraryClient{Interface: client, core: &libraryCoreV1{CoreV1Interface: client.CoreV1(), p: p, recorder: recorder}}
}

// WithEventSink returns a clientset for the provisioning library whose Events
// go through events (a clientset with its own client-side rate limit, so
// Events neither starve nor are starved by the work) and are trimmed to one
// per provisioned volume: the library's "Provisioning" Event is dropped and
// its "ProvisioningSucceeded" Event carries the decision from log. Every
// other call goes to client.
func WithEventSink(client, events kubernetes.Interface, log *DecisionLog) kubernetes.Interface {
	return &libraryClient{Interface: client, core: &libraryCoreV1{CoreV1Interface: client.CoreV1(), events: events.CoreV1(), log: log}}
}

// PersistentVolumes is the guard's PV client (see libraryClient).
func (c *libraryCoreV1) PersistentVolumes() corev1client.PersistentVolumeInterface {
	if c.p == nil {
		return c.CoreV1Interface.PersistentVolumes()
	}
	return &guardPVs{PersistentVolumeInterface: c.CoreV1Interface.PersistentVolumes(), c: c}
}

// PersistentVolumeClaims is the guard's claim client (see libraryClient).
func (c *libraryCoreV1) PersistentVolumeClaims(namespace string) corev1client.PersistentVolumeClaimInterface {
	if c.p == nil {
		return c.CoreV1Interface.PersistentVolumeClaims(namespace)
	}
	return &guardClaims{PersistentVolumeClaimInterface: c.CoreV1Interface.PersistentVolumeClaims(namespace), dropRecord: c.p.cfg.Node != nil,
		writes: c.p.records.Writer(), p: c.p}
}

// Events is the event sink (see libraryClient).
func (c *libraryCoreV1) Events(namespace string) corev1client.EventInterface {
	if c.events == nil {
		return c.CoreV1Interface.Events(namespace)
	}
	return &trimmedEvents{EventInterface: c.events.Events(namespace), log: c.log}
}

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

type guardPVs struct {
	corev1client.PersistentVolumeInterface
	c *libraryCoreV1
}

// Create creates pv and resolves AlreadyExists (see libraryClient).
func (g *guardPVs) Create(ctx context.Context, pv *v1.PersistentVolume, opts metav1.CreateOptions) (*v1.PersistentVolume, error) {
	out, err := g.PersistentVolumeInterface.Create(ctx, pv, opts)
	if !apierrors.IsAlreadyExists(err) || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != g.c.p.cfg.DriverName {
		return out, err
	}
	guard := inflight.NameGuard{PVs: g.PersistentVolumeInterface, Recorder: g.c.recorder,
		DeleteVolume: func(ctx context.Context, pv *v1.PersistentVolume) error { return g.c.p.delete(ctx, pv, false) }}
	if g.c.p.deps.Decisions != nil {
		guard.Decisions = g.c.p.deps.Decisions
	}
	if rerr := guard.Resolve(ctx, pv); rerr != nil {
		return nil, rerr
	}
	return out, err
}

type guardClaims struct {
	corev1client.PersistentVolumeClaimInterface
	// dropRecord (node deployment): the reschedule also removes the
	// claim's in-flight record. The instance hands a claim back only once
	// no volume of it remains on its node (beforeHandBack), and the next
	// node's instance records its own attempt; a record left behind would
	// name no node whose instance could clear it.
	dropRecord bool
	// writes sends the hand-back (a PATCH, or an UPDATE where RBAC
	// refuses the PATCH).
	writes *inflight.ClaimWriter
	p      *Provisioner
}

// Update sends a claim without volume.kubernetes.io/selected-node (the
// library's reschedule, its only claim update) as a PATCH removing that
// annotation (and, with node deployment or when no volume of the claim's
// name exists, the in-flight record), with the
// claim's UID as precondition (where RBAC refuses the PATCH, an UPDATE from
// the API's current claim: see inflight.ClaimWriter); anything else as is.
func (g *guardClaims) Update(ctx context.Context, claim *v1.PersistentVolumeClaim, opts metav1.UpdateOptions) (*v1.PersistentVolumeClaim, error) {
	if _, ok := claim.Annotations[annSelectedNode]; ok || claim.UID == "" {
		return g.PersistentVolumeClaimInterface.Update(ctx, claim, opts)
	}
	// A claim whose last CreateVolume said that no volume of its name
	// exists loses its record with the same write.
	absent := g.p != nil && g.p.records.get().IsAbsent(claim.UID)
	got, err := g.writes.Write(ctx, claim, inflight.HandBack(claim.UID, g.dropRecord || absent, g.handBackLabel(claim), opts))
	if err == nil && absent && len(opts.DryRun) == 0 {
		g.p.records.get().Forget(claim.UID)
	}
	return got, err
}

// handBackLabel is the node label a claim handed back gets with node
// deployment (nil: the label is left alone): the pool's for a claim of an
// immediate-binding class, none otherwise (handBackLabel). A class the
// cache does not hold leaves the label to csi-node-router.
func (g *guardClaims) handBackLabel(claim *v1.PersistentVolumeClaim) *inflight.Label {
	if g.p == nil || g.p.cfg.Node == nil || g.p.deps.Classes == nil {
		return nil
	}
	class, err := g.p.deps.Classes.Get(ptr.Deref(claim.Spec.StorageClassName, ""))
	if err != nil {
		return nil
	}
	return &inflight.Label{Key: nodelabel.Key, Value: handBackLabel(g.p.cfg.DriverName, class)}
}

// setLabel sets a label, or removes it when value is "" (node
// deployment's claim take).
func setLabel(m *metav1.ObjectMeta, key, value string) {
	if value == "" {
		delete(m.Labels, key)
		return
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[key] = value
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
