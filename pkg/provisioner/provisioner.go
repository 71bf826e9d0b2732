package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/datasource"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/fullsegments"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// annSelectedNode is the scheduler's annotation on a delayed-binding claim.
const annSelectedNode = storagehelpers.AnnSelectedNode

// ControllerClient is the subset of the CSI Controller service the
// provisioner calls. csi.ControllerClient implements it; it must be safe for
// concurrent use.
type ControllerClient interface {
	CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error)
	DeleteVolume(ctx context.Context, in *csi.DeleteVolumeRequest, opts ...grpc.CallOption) (*csi.DeleteVolumeResponse, error)
	// GetCapacity serves capacity publishing (capacity.Client) and the
	// node claimer's check of an immediate-binding claim.
	GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, opts ...grpc.CallOption) (*csi.GetCapacityResponse, error)
}

// CapacityRefresher is what the provisioning flow tells capacity
// publishing (*capacity.Publisher): the segments a provision or a delete
// touched.
type CapacityRefresher interface {
	// Touch asks for the segments to be refreshed soon (asynchronous).
	Touch([]*csi.Topology)
	// Refresh refreshes the segments' objects now and returns, for those of
	// class, "namespace/name" -> resourceVersion after the refresh.
	Refresh(ctx context.Context, topologies []*csi.Topology, class string) (map[string]string, error)
}

// Deps are the collaborators of a Provisioner. CSI, Secrets, CSINodes and
// Index are required (New refuses to start without them); every other one
// may be nil, which switches off what its comment names.
type Deps struct {
	// CSI is the driver's controller service. Required.
	CSI ControllerClient
	// Secrets reads the Secrets a class references, with a GET each time:
	// Secrets are not cached (package doc lists every GET).
	// Required.
	Secrets corev1client.SecretsGetter
	// CSINodes lists CSINode objects from an informer. Required.
	CSINodes storagelisters.CSINodeLister
	// Index holds the driver's known topology segments, fed by informers.
	// Required.
	Index *topology.Index
	// Decisions receives the topology decision of each successful provision,
	// to be reported in the claim's ProvisioningSucceeded Event. nil: no
	// decision in the Event.
	Decisions *DecisionLog
	// Capacity is told which segments a provision (Refresh, synchronous) or
	// a delete (Touch, asynchronous) touched. nil: no capacity publishing.
	Capacity CapacityRefresher
	// Metrics records operations and reschedules. nil: no metrics.
	Metrics *Metrics
	// Clock tells the time of full-segment marks. nil: the real clock.
	Clock clock.PassiveClock
	// Sources are the listers and the protection of data sources (clones,
	// snapshots) and the VolumeAttributesClass lister. Each may be nil:
	// claims needing it are refused with an Event. See sources.go.
	Sources Sources
	// ClaimPatcher patches claims to hold the durable in-flight record
	// (inflight.Finalizer) before each CreateVolume. nil switches the record
	// off, which is unsafe: a volume created before a crash or a race can
	// leak (pkg/inflight).
	ClaimPatcher corev1client.PersistentVolumeClaimsGetter
	// Classes reads StorageClasses: at delete, the provisioner secret of a
	// PV without deletion-secret annotations comes from its class, as
	// upstream. nil: such PVs are deleted without secrets.
	Classes storagelisters.StorageClassLister
	// Attachments tells which VolumeAttachments name a PV: Delete refuses
	// while one does. nil: no check (a driver without
	// PUBLISH_UNPUBLISH_VOLUME). See attachments.go.
	Attachments *AttachmentIndex
	// Retries slows the library's next retry of a claim the driver refused
	// as invalid (INVALID_ARGUMENT). nil: every failure backs off alike.
	// See slowretry.go.
	Retries *SlowRetries
	// ClaimVolumes finds the PVs of a claim by the UID in their claimRef,
	// and PVs by name, from the PV informer: Provision makes no volume for
	// a claim that has a PV, whatever its name (pvname.go). nil: no
	// check.
	ClaimVolumes *ClaimVolumeIndex
	// DriverStatus tells whether the driver answers
	// (driverconn.Monitor.Status). Read with node deployment only: a claim
	// selected for the node goes back to the scheduler while it does not.
	// nil: the driver is taken to answer.
	DriverStatus func() (connected bool, reason string)
}

// Provisioner provisions and deletes volumes of one CSI driver. It implements
// controller.Provisioner and controller.BlockProvisioner and is safe for
// concurrent use by the library's workers.
type Provisioner struct {
	cfg  Config
	deps Deps

	mu sync.Mutex
	// inBackground holds the volume names, by claim UID, whose last
	// CreateVolume may still be running in the driver.
	inBackground map[types.UID]string
	// handBacks says when the scheduler chose a node out of a data
	// source's reach again.
	handBacks repeatedHandBacks
	// deleted remembers the PVs whose volume was just deleted.
	deleted *deletedVolumes
	// full remembers the segments recently found without room, per class.
	full *fullsegments.Holds
	// records is the durable in-flight record (pkg/inflight); nil when it
	// is off.
	records *inflight.Records
	// selections times claims from selected-node to PV, fed by the
	// Controller's claim informer (SelectionClock).
	selections *SelectionClock
	// sources resolves claims' data sources.
	sources *datasource.Resolver
	// migration serves the in-tree plugin the driver replaces; nil when
	// it replaces none.
	migration *migration
	// stopping: the process is stopping; no CreateVolume starts (see
	// drain.go).
	stopping atomic.Bool
	// calls counts the Provision calls running.
	calls atomic.Int64
}

var (
	_ controller.Provisioner      = &Provisioner{}
	_ controller.BlockProvisioner = &Provisioner{}
)

// New returns a Provisioner for cfg.DriverName.
func New(cfg Config, deps Deps) (*Provisioner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.CSI == nil || deps.Secrets == nil || deps.CSINodes == nil || deps.Index == nil {
		return nil, errors.New("provisioner: CSI, Secrets, CSINodes and Index are required")
	}
	return &Provisioner{cfg: cfg, deps: deps, inBackground: map[types.UID]string{}, deleted: newDeletedVolumes(nil),
		full: fullsegments.New(deps.Clock, cfg.FullSegmentHold, deps.Metrics.fullSegments()), records: newRecords(deps.ClaimPatcher, cfg.Node),
		migration: newMigration(cfg.DriverName), selections: NewSelectionClock(nil), sources: newResolver(cfg, deps)}, nil
}

// SupportsBlock reports that raw block claims are passed to the driver, which
// rejects them if it cannot serve them.
func (p *Provisioner) SupportsBlock(context.Context) bool { return true }

// Provision creates the volume of a claim and returns its PV. See the package
// documentation for how errors map onto the returned state.
//
// The walk: the claim's in-flight record is opened before CreateVolume
// (openRecord, pkg/inflight) and the PV is built from the driver's answer
// (finishPV); returning the PV ends the record's in-memory state
// (recordOutcome). The PV is not written yet: the library creates it
// through libraryClient, and that write can still DELETE the new volume,
// when another volume's PV holds the PV's name (the record guard,
// inflight.NameGuard). The finalizer goes once the record keeper sees the
// PV in the informer.
func (p *Provisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	start := time.Now()
	if err := p.refuseWhileStopping(); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	p.calls.Add(1)
	defer p.calls.Add(-1)
	defer p.records.Enter(opts.PVC.UID)()
	// Only this attempt's outcome decides how slowly the next one comes.
	p.deps.Retries.Unmark(opts.PVC.UID)
	if !p.cfg.Node.OwnsClaim(opts.PVC) {
		return nil, controller.ProvisioningFinished, &controller.IgnoredError{Reason: "claim selected for another node"}
	}
	// The PV is named after the volume (pvname.go), not pvc-<claim UID>.
	opts.PVName = p.pvName(opts.PVC)
	var pv *v1.PersistentVolume
	state, err := p.checkExistingPV(opts.PVC, opts.PVName)
	if err == nil {
		pv, state, err = p.provision(ctx, opts)
	}
	if state == controller.ProvisioningReschedule {
		state, err = p.beforeHandBack(ctx, opts, err)
	}
	p.recordOutcome(opts.PVC.UID, pv)
	var ignored *controller.IgnoredError
	if errors.As(err, &ignored) {
		return pv, state, err
	}
	if err != nil && p.deps.Decisions != nil {
		p.deps.Decisions.RecordFailure(opts.PVC.UID, err, failureAnnotations(state, err))
	}
	p.deps.Metrics.observeOperation("provision", opts.StorageClass.Name, provisionResult(state, err), time.Since(start))
	if err == nil && pv != nil && p.selections != nil {
		node := opts.PVC.Annotations[annSelectedNode]
		if d, ok := p.selections.Since(opts.PVC.UID, node); ok && node != "" {
			p.deps.Metrics.observeSelectedToPV(opts.StorageClass.Name, d)
		}
	}
	return pv, state, err
}

func (p *Provisioner) provision(ctx context.Context, opts controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim), "storageClass", class.Name)
	ctx = klog.NewContext(ctx, logger)
	// migrated: the class names the in-tree plugin the driver replaces;
	// the driver gets it translated to CSI and the PV is written in the
	// plugin's form, as upstream writes it.
	class, migrated, err := p.csiClass(logger, class)
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	opts.StorageClass = class
	selectedNode := claim.Annotations[annSelectedNode]
	delayed := selectedNode != ""

	req, err := p.buildCreateRequest(ctx, opts)
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	req.warnDeprecated(logger)
	if req.source, err = p.sources.Resolve(ctx, claim, class); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	req.setSource()
	seg, decision, end := p.placeRequest(opts, req, selectedNode)
	if end != nil {
		return p.fail(ctx, claim, req.csi.Name, end.state, end.reason, end.err)
	}
	if ref := req.secrets[secretProvisioner]; ref != nil {
		if req.csi.Secrets, err = p.readSecret(ctx, ref); err != nil {
			return nil, controller.ProvisioningNoChange, fmt.Errorf("reading provisioner secret: %w", err)
		}
	}

	if err := p.driverLive(); err != nil && delayed {
		return p.fail(ctx, claim, req.csi.Name, controller.ProvisioningReschedule, RescheduleDriverNotLive, err)
	}

	if err := p.protectSource(ctx, req.source); err != nil {
		return nil, controller.ProvisioningFinished, err
	}

	if state, err := p.openRecord(ctx, claim, req.csi); err != nil {
		return nil, state, err
	}
	logger.V(5).Info("Calling CreateVolume", "request", protosanitizer.StripSecrets(req.csi))
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.deps.CSI.CreateVolume(callCtx, req.csi)
	cancel()
	if err != nil {
		pv, state, err := p.createVolumeFailed(ctx, claim, class.Name, req.csi, seg, delayed, err)
		if strings.HasSuffix(decision, termsAsWrittenNote) {
			err = fmt.Errorf("%w (%s)", err, termsAsWrittenNote)
		}
		return pv, state, err
	}
	p.forgetBackground(claim.UID)
	p.handBacks.forget(claim.UID)

	if delayed && p.cfg.SupportsTopology && !accessibleFrom(resp.GetVolume().GetAccessibleTopology(), opts.SelectedNode) {
		return p.dropInaccessible(ctx, opts, req, resp.GetVolume(), seg)
	}
	if seg != nil {
		p.full.Seen(ctx, class.Name, seg, req.csi.GetCapacityRange().GetRequiredBytes())
	}

	return p.finishPV(ctx, opts, req, resp, migrated, decision)
}

// attemptEnd ends a provision attempt with a state and, for a hand-back to
// the scheduler, its reason (see Provisioner.fail).
type attemptEnd struct {
	state  controller.ProvisioningState
	reason RescheduleReason
	err    error
}

// placeRequest sets the accessibility requirements of req (a driver with
// topology support) and returns the selected node's segment (nil for
// immediate binding) and the decision the Event reports; a non-nil end
// stops the attempt: the requirements cannot be computed, or the node's
// segment is held full for the class.
func (p *Provisioner) placeRequest(opts controller.ProvisionOptions, req *createRequest, selectedNode string) (topology.Segment, string, *attemptEnd) {
	if !p.cfg.SupportsTopology {
		return nil, "driver without topology support, no requirements", nil
	}
	claim, class, delayed := opts.PVC, opts.StorageClass, selectedNode != ""
	placed, err := p.requirements(opts, selectedNode, req.source)
	reqs := placed.Requirement
	if err != nil {
		state, reason := requirementsState(err, delayed)
		return nil, "", &attemptEnd{state, reason, fmt.Errorf("computing topology requirements: %w", err)}
	}
	strict := p.cfg.StrictTopology
	var seg topology.Segment
	if delayed {
		seg = fullsegments.NodeSegment(reqs)
	}
	// A claim whose earlier CreateVolume may still be running in the
	// driver is asked again as before: the idempotent call returns that
	// volume (holding it would delete a volume perhaps made in the node's
	// segment; other requirements could be refused).
	if _, pending := p.backgroundName(claim.UID); seg != nil && !pending {
		if st := p.full.Status(class.Name, seg, req.csi.GetCapacityRange().GetRequiredBytes()); st.Held {
			return nil, "", &attemptEnd{controller.ProvisioningReschedule, RescheduleNoCapacity,
				&fullsegments.HeldError{Class: class.Name, Segment: seg.String(), Status: st}}
		} else if st.Known && !st.Wide {
			// Only the node's segment: the driver must not fall back to a
			// segment the node cannot reach.
			reqs, strict = fullsegments.OnlySegment(seg), true
		}
	}
	req.csi.AccessibilityRequirements = reqs
	decision := describeRequirements(selectedNode, reqs, strict)
	if placed.TermsAsWritten {
		decision += "; " + termsAsWrittenNote
	}
	return seg, decision, nil
}

// createVolumeFailed ends an attempt whose CreateVolume failed: a segment
// without room is learnt as full for the class, an invalid request is
// retried at the slow pace, and the claim is handed back or retried as the
// code says.
func (p *Provisioner) createVolumeFailed(ctx context.Context, claim *v1.PersistentVolumeClaim, class string, req *csi.CreateVolumeRequest,
	seg topology.Segment, delayed bool, err error) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	name := req.GetName()
	state, reason := createVolumeState(err, delayed)
	if _, pending := p.backgroundName(claim.UID); !pending && inflight.VolumeAbsent(err) {
		p.records.MarkAbsent(claim)
	}
	if reason == RescheduleNoCapacity && seg != nil {
		p.full.Learn(ctx, class, seg, false, req.GetCapacityRange().GetRequiredBytes(), "RESOURCE_EXHAUSTED")
	}
	code := status.Code(err)
	err = &createVolumeError{name: name, err: err}
	if code == codes.InvalidArgument && p.deps.Retries != nil {
		p.deps.Retries.Slow(claim.UID)
		err = fmt.Errorf("%w; the driver finds the request invalid: next attempt in %s, or at once when the claim changes",
			err, p.deps.Retries.Max())
	}
	return p.fail(ctx, claim, name, state, reason, err)
}

// finishPV describes the new volume as a PV (in the in-tree plugin's form
// when migrated), or deletes the volume when it cannot be described, and
// records the decision and the capacity the volume took.
func (p *Provisioner) finishPV(ctx context.Context, opts controller.ProvisionOptions, req *createRequest, resp *csi.CreateVolumeResponse,
	migrated bool, decision string) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	claim, class := opts.PVC, opts.StorageClass
	logger := klog.FromContext(ctx)
	pv, err := p.buildPV(opts, req, resp)
	if err == nil {
		err = p.sources.CheckCreated(req.source, resp.GetVolume())
	}
	if err == nil && migrated {
		pv, err = p.migration.toInTree(pv)
	}
	if err != nil {
		// The volume exists but cannot be described: remove it rather than leak it.
		if derr := p.deleteVolume(ctx, resp.GetVolume().GetVolumeId(), req.csi.Secrets); derr != nil {
			p.rememberBackground(claim.UID, req.csi.Name)
			return nil, controller.ProvisioningInBackground, fmt.Errorf("%w (and removing the volume failed: %v)", err, derr)
		}
		return nil, controller.ProvisioningFinished, err
	}
	if p.deps.Decisions != nil {
		p.deps.Decisions.Record(claim.UID, decision+placedIn(resp.GetVolume().GetAccessibleTopology()))
	}
	p.refreshCapacity(ctx, pv, resp.GetVolume().GetAccessibleTopology(), class.Name)
	logger.V(2).Info("Provisioned volume", "pv", pv.Name, "volumeHandle", resp.GetVolume().GetVolumeId(), "migrated", migrated,
		"decision", decision, "accessibleTopology", segmentsString(resp.GetVolume().GetAccessibleTopology()))
	return pv, controller.ProvisioningFinished, nil
}

// csiClass returns the class a claim is provisioned with: a class of the
// driver as it is, a class of the in-tree plugin the driver replaces
// translated to CSI (migrated). A class of any other provisioner is an
// IgnoredError.
func (p *Provisioner) csiClass(logger klog.Logger, class *storagev1.StorageClass) (*storagev1.StorageClass, bool, error) {
	if p.migration.servesClass(class) {
		csiClass, err := p.migration.translateClass(logger, class)
		if err != nil {
			return nil, true, err
		}
		logger.V(4).Info("Translated in-tree StorageClass to CSI", "plugin", class.Provisioner)
		return csiClass, true, nil
	}
	if class.Provisioner != p.cfg.DriverName {
		return nil, false, &controller.IgnoredError{
			Reason: fmt.Sprintf("class %q belongs to provisioner %q", class.Name, class.Provisioner)}
	}
	return class, false, nil
}

// dropInaccessible handles a volume the driver placed in a segment the
// selected node cannot reach (its own was full, or the driver reports a
// volume outside the requirements): the volume is useless for this pod. It
// is removed, the node's segment is marked full for the class, and the
// scheduler picks a node again.
func (p *Provisioner) dropInaccessible(ctx context.Context, opts controller.ProvisionOptions, req *createRequest, vol *csi.Volume, seg topology.Segment) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	claim, selectedNode := opts.PVC, opts.PVC.Annotations[annSelectedNode]
	err := fmt.Errorf("driver placed volume %q in %s, which node %q cannot reach (its segment has no room)",
		vol.GetVolumeId(), segmentsString(vol.GetAccessibleTopology()), selectedNode)
	if seg != nil {
		p.full.Learn(ctx, opts.StorageClass.Name, seg, len(vol.GetAccessibleTopology()) > 1, req.csi.GetCapacityRange().GetRequiredBytes(),
			"volume placed out of the node's reach")
	}
	if derr := p.deleteVolume(ctx, vol.GetVolumeId(), req.csi.Secrets); derr != nil {
		p.rememberBackground(claim.UID, req.csi.Name)
		return nil, controller.ProvisioningInBackground, fmt.Errorf("%w; removing it failed: %v", err, derr)
	}
	return p.fail(ctx, claim, req.csi.Name, controller.ProvisioningReschedule, RescheduleVolumeNotAccessible, err)
}

// refreshCapacity refreshes the capacity objects of the segments a new
// volume is in and records their versions on its PV.
func (p *Provisioner) refreshCapacity(ctx context.Context, pv *v1.PersistentVolume, accessible []*csi.Topology, class string) {
	if p.deps.Capacity == nil {
		return
	}
	versions, err := p.deps.Capacity.Refresh(ctx, accessible, class)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Refreshing storage capacity after the provision; the next poll retries")
	}
	if len(versions) > 0 {
		if pv.Annotations == nil {
			pv.Annotations = map[string]string{}
		}
		pv.Annotations[topology.AnnCapacityVersions] = topology.FormatCapacityVersions(versions)
	}
}

// fail records the outcome of a failed attempt. A claim that goes back to the
// scheduler after an earlier attempt may still be running in the driver first
// has that volume deleted, so that the new node's attempt cannot find (or
// leak) a volume made for the old one.
func (p *Provisioner) fail(ctx context.Context, claim *v1.PersistentVolumeClaim, name string, state controller.ProvisioningState, reason RescheduleReason, err error) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	logger := klog.FromContext(ctx)
	switch state {
	case controller.ProvisioningInBackground:
		p.rememberBackground(claim.UID, name)
	case controller.ProvisioningReschedule:
		if pending, ok := p.backgroundName(claim.UID); ok {
			if derr := p.deleteInFlight(ctx, claim.UID, pending); derr != nil {
				return nil, controller.ProvisioningInBackground,
					fmt.Errorf("%w; not rescheduling yet: removing volume %q of the earlier attempt failed: %v", err, pending, derr)
			}
			p.forgetBackground(claim.UID)
		}
		if reason == RescheduleSourceUnreachable {
			err = p.handBacks.sourceUnreachable(claim, err)
		}
		logger.V(2).Info("Returning claim to the scheduler", "reason", reason, "err", err)
		p.deps.Metrics.observeReschedule(reason)
		err = &handBackError{reason: reason, err: err}
	default:
		p.forgetBackground(claim.UID)
	}
	return nil, state, err
}

func (p *Provisioner) rememberBackground(uid types.UID, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inBackground[uid] = name
}

func (p *Provisioner) forgetBackground(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inBackground, uid)
}

func (p *Provisioner) backgroundName(uid types.UID) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name, ok := p.inBackground[uid]
	return name, ok
}

// requirements computes the accessibility requirements of a claim from
// informer data and the segment index.
func (p *Provisioner) requirements(opts controller.ProvisionOptions, selectedNode string, source *datasource.Source) (topology.Placement, error) {
	in := topology.RequirementsInput{
		Driver:            p.cfg.DriverName,
		SelectedNode:      opts.SelectedNode,
		SelectedNodeName:  selectedNode,
		AllowedTopologies: opts.StorageClass.AllowedTopologies,
		Strict:            p.cfg.StrictTopology,
		Immediate:         p.cfg.ImmediateTopology,
		ClaimName:         opts.PVC.Name,
		Index:             p.deps.Index,
	}
	if source != nil {
		in.Source, in.SourceName, in.SourceBasis = source.Reach, source.String(), source.Basis
	}
	if selectedNode != "" {
		csiNode, err := p.deps.CSINodes.Get(selectedNode)
		switch {
		case apierrors.IsNotFound(err):
			csiNode = nil
		case err != nil:
			return topology.Placement{}, fmt.Errorf("reading CSINode %q: %w", selectedNode, err)
		}
		in.CSINode = csiNode
	}
	return topology.Place(in)
}

// readSecret returns the data of a referenced Secret.
func (p *Provisioner) readSecret(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	secret, err := p.deps.Secrets.Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, &secretError{namespace: ref.Namespace, name: ref.Name, err: err}
	}
	out := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		out[k] = string(v)
	}
	return out, nil
}

// Delete removes the volume behind a PV of this driver, or behind a PV of
// the in-tree plugin the driver replaces that kube-controller-manager
// marked as migrated to the driver (translated to CSI first). A volume the
// driver no longer knows counts as deleted.
func (p *Provisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	start := time.Now()
	migrated := p.migration.migratedPV(pv)
	if migrated {
		csiPV, err := p.migration.toCSI(klog.FromContext(ctx), pv)
		if err != nil {
			p.deps.Metrics.observeOperation("delete", pv.Spec.StorageClassName, resultError, time.Since(start))
			return err
		}
		pv = csiPV
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != p.cfg.DriverName {
		return &controller.IgnoredError{Reason: fmt.Sprintf("PV %q is not a volume of driver %q", pv.Name, p.cfg.DriverName)}
	}
	err := p.delete(ctx, pv, migrated)
	result := resultSuccess
	if err != nil {
		result = resultError
	}
	p.deps.Metrics.observeOperation("delete", pv.Spec.StorageClassName, result, time.Since(start))
	return err
}

// delete deletes the volume of a CSI PV (migrated: translated from the
// in-tree plugin's PV).
func (p *Provisioner) delete(ctx context.Context, pv *v1.PersistentVolume, migrated bool) error {
	if err := p.checkDetached(pv.Name); err != nil {
		return err
	}
	secrets, err := p.deletionSecrets(ctx, pv, migrated)
	if err != nil {
		return err
	}
	if err := p.deleteVolume(ctx, pv.Spec.CSI.VolumeHandle, secrets); err != nil {
		return err
	}
	p.deleted.record(pv.UID)
	p.full.Freed(ctx, affinityTopologies(pv))
	if p.deps.Capacity != nil {
		p.deps.Capacity.Touch(affinityTopologies(pv))
	}
	return nil
}

// affinityTopologies turns a PV's node affinity back into the segments it
// names (terms whose expressions are single-value In).
func affinityTopologies(pv *v1.PersistentVolume) []*csi.Topology {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	var out []*csi.Topology
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		seg := map[string]string{}
		for _, e := range term.MatchExpressions {
			if e.Operator == v1.NodeSelectorOpIn && len(e.Values) == 1 {
				seg[e.Key] = e.Values[0]
			}
		}
		if len(seg) > 0 {
			out = append(out, &csi.Topology{Segments: seg})
		}
	}
	return out
}

func (p *Provisioner) deleteVolume(ctx context.Context, id string, secrets map[string]string) error {
	if id == "" {
		return nil
	}
	req := &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}
	klog.FromContext(ctx).V(5).Info("Calling DeleteVolume", "request", protosanitizer.StripSecrets(req))
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if _, err := p.deps.CSI.DeleteVolume(callCtx, req); err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("DeleteVolume %q: %w", id, err)
	}
	return nil
}

// accessibleFrom reports whether a node's labels satisfy one of a volume's
// accessible topologies. A volume without accessible topology is reachable
// from everywhere.
func accessibleFrom(topologies []*csi.Topology, node *v1.Node) bool {
	if len(topologies) == 0 || node == nil {
		return true
	}
	for _, t := range topologies {
		ok := true
		for k, v := range t.GetSegments() {
			if node.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
