package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// InFlightRecordFinalizer is the finalizer that records, on a claim, that a volume
// of the claim's deterministic name may exist in the driver. It is added in
// one PATCH before the first CreateVolume of the claim and removed as soon
// as a PV of the claim exists, or, for a claim deleted before it got one,
// once DeleteVolume of that name has succeeded (docs/operations.md, "The
// in-flight record"): bound claims do not keep it, so that upstream
// external-provisioner, which never removes it, can take over. The name
// follows upstream external-provisioner's claim finalizers
// (provisioner.storage.kubernetes.io/cloning-protection).
const InFlightRecordFinalizer = contract.InFlightRecordFinalizer

// Event reasons of the in-flight record, posted on the claim.
const (
	// ReasonInFlightVolumeDeleted: the claim was deleted before its volume
	// got a PV; the volume was deleted and the record removed.
	ReasonInFlightVolumeDeleted = contract.ReasonInFlightVolumeDeleted
	// ReasonInFlightVolumeAbandoned: the record was removed without
	// knowing that no volume remains (the class is gone, or the driver
	// gave a final error to the CreateVolume that learns the volume's ID).
	ReasonInFlightVolumeAbandoned = contract.ReasonInFlightVolumeAbandoned
	// ReasonVolumeNameTaken: the PV of a new volume could not be created
	// because another volume's PV holds the name; the new volume was
	// deleted.
	ReasonVolumeNameTaken = contract.ReasonVolumeNameTaken
)

// errClaimGoneOrDeleting stops a provision whose claim is gone, being deleted
// or already bound: no CreateVolume may run for it.
var errClaimGoneOrDeleting = errors.New("claim is gone, being deleted or already bound")

// errClaimSelectedElsewhere stops a node deployment's provision of a claim
// that the API shows selected for another node.
var errClaimSelectedElsewhere = fmt.Errorf("%w: claim selected for another node", errClaimGoneOrDeleting)

// recentSuccess is how long a claim whose provision just returned a PV waits
// for that PV to appear in the informer before its record is treated as
// open: the library creates the PV right after Provision returns.
const recentSuccess = 2 * time.Minute

// inFlightRecords is the provisioner's side of the durable in-flight record: the
// claim PATCH before CreateVolume, the claims being provisioned right now,
// and the last request per claim (to ask for a volume again by name). Safe
// for concurrent use. A nil *inFlightRecords records nothing (protection off).
type inFlightRecords struct {
	// writes writes the record (and, for the record guard, hand-backs).
	writes *claimWriter
	// node, with node deployment, is the instance's node: a claim the
	// record's PATCH finds selected for another node gets no CreateVolume.
	node *NodeDeployment

	mu sync.Mutex
	// busy holds the claims a Provision call is working on.
	busy map[types.UID]bool
	// requests holds the last CreateVolume request per claim until the claim
	// has a PV or its record is cleared.
	requests map[types.UID]*csi.CreateVolumeRequest
	// succeeded holds when a provision last returned a PV for a claim,
	// until the claim's record is removed.
	succeeded map[types.UID]time.Time
	// absent holds the claims whose last CreateVolume in this process
	// said that no volume of their name exists (volumeAbsent), until their
	// next attempt: their record may go (see dropAbsent).
	absent map[types.UID]*v1.PersistentVolumeClaim
}

func newInFlightRecords(claims corev1client.PersistentVolumeClaimsGetter, node *NodeDeployment) *inFlightRecords {
	if claims == nil {
		return nil
	}
	return &inFlightRecords{writes: newClaimWriter(claims), node: node, busy: map[types.UID]bool{}, requests: map[types.UID]*csi.CreateVolumeRequest{},
		succeeded: map[types.UID]time.Time{}, absent: map[types.UID]*v1.PersistentVolumeClaim{}}
}

// enter marks a claim as being provisioned; the returned function ends it.
func (f *inFlightRecords) enter(uid types.UID) func() {
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	f.busy[uid] = true
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.busy, uid)
		f.mu.Unlock()
	}
}

// tryClaim reports whether no provision works on the claim, and if so
// marks it busy for the caller; release with the returned function.
func (f *inFlightRecords) tryClaim(uid types.UID) (func(), bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy[uid] {
		return nil, false
	}
	f.busy[uid] = true
	return func() {
		f.mu.Lock()
		delete(f.busy, uid)
		f.mu.Unlock()
	}, true
}

func (f *inFlightRecords) remember(uid types.UID, req *csi.CreateVolumeRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[uid] = proto.Clone(req).(*csi.CreateVolumeRequest)
	delete(f.absent, uid)
}

func (f *inFlightRecords) lastRequest(uid types.UID) *csi.CreateVolumeRequest {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.requests[uid]; r != nil {
		return proto.Clone(r).(*csi.CreateVolumeRequest)
	}
	return nil
}

// done forgets a claim whose volume got a PV (pvReturned) or whose record
// is cleared.
func (f *inFlightRecords) done(uid types.UID, pvReturned bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.requests, uid)
	delete(f.absent, uid)
	if pvReturned {
		now := time.Now()
		for k, t := range f.succeeded {
			if now.Sub(t) > recentSuccess {
				delete(f.succeeded, k)
			}
		}
		f.succeeded[uid] = now
	} else {
		delete(f.succeeded, uid)
	}
}

func (f *inFlightRecords) recentlySucceeded(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.succeeded[uid]
	return ok && time.Since(t) <= recentSuccess
}

// finalizerPatch adds InFlightRecordFinalizer to a claim, with the claim's UID as
// precondition. Finalizers merge in a strategic merge patch, so the others
// stay; an existing one is not added twice, and then the patch changes
// nothing (no write, no new resourceVersion).
func finalizerPatch(uid types.UID) []byte {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "finalizers": []string{InFlightRecordFinalizer}}})
	return data
}

// removeFinalizerPatch removes InFlightRecordFinalizer from a claim and leaves
// every other finalizer.
func removeFinalizerPatch(uid types.UID) []byte {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid,
		"$deleteFromPrimitiveList/finalizers": []string{InFlightRecordFinalizer}}})
	return data
}

// HasInFlightFinalizer reports whether a claim carries InFlightRecordFinalizer.
func HasInFlightFinalizer(claim *v1.PersistentVolumeClaim) bool {
	for _, f := range claim.Finalizers {
		if f == InFlightRecordFinalizer {
			return true
		}
	}
	return false
}

// open writes the record before a CreateVolume: one PATCH of the claim
// (an UPDATE where RBAC refuses the PATCH, see claimWriter), every attempt, so that the answer comes from the API and not from a cache
// that may be late. The API refuses a new finalizer on a claim being
// deleted, and a claim that is gone or was replaced (other UID) fails the
// patch: then no CreateVolume runs (errClaimGoneOrDeleting). A claim that
// already carries the finalizer is not written again.
func (f *inFlightRecords) open(ctx context.Context, claim *v1.PersistentVolumeClaim, req *csi.CreateVolumeRequest) error {
	if f == nil {
		return nil
	}
	got, err := f.writes.write(ctx, claim, addRecord(claim.UID))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return fmt.Errorf("%w: %v", errClaimGoneOrDeleting, err)
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		// "no new finalizers can be added if the object is being deleted"
		if claim.DeletionTimestamp != nil || apierrors.IsInvalid(err) {
			return fmt.Errorf("%w: %v", errClaimGoneOrDeleting, err)
		}
		return fmt.Errorf("recording the in-flight volume %q on the claim: %w", req.GetName(), err)
	case err != nil:
		return fmt.Errorf("recording the in-flight volume %q on the claim: %w", req.GetName(), err)
	case got.UID != claim.UID || got.DeletionTimestamp != nil || got.Spec.VolumeName != "":
		return errClaimGoneOrDeleting
	case !f.node.ownsClaim(got):
		// Node deployment: the answer of the API, not of a cache, decides
		// which node's instance may create the volume.
		return fmt.Errorf("%w: selected for node %q, not %q", errClaimSelectedElsewhere, got.Annotations[annSelectedNode], f.node.NodeName)
	}
	f.remember(claim.UID, req)
	return nil
}

// openRecord is Provision's hook before CreateVolume; a claim gone, being
// deleted or bound ends the attempt quietly (its record, if any, is the
// record keeper's business).
func (p *Provisioner) openRecord(ctx context.Context, claim *v1.PersistentVolumeClaim, req *csi.CreateVolumeRequest) (controller.ProvisioningState, error) {
	err := p.records.open(ctx, claim, req)
	if errors.Is(err, errClaimGoneOrDeleting) {
		klog.FromContext(ctx).V(2).Info("Not creating a volume: the claim is gone, being deleted or bound", "err", err)
		return controller.ProvisioningFinished, &controller.IgnoredError{Reason: err.Error()}
	}
	if err != nil {
		return controller.ProvisioningNoChange, err
	}
	return controller.ProvisioningFinished, nil
}

// recordOutcome is the end of a Provision call for the record: a returned
// PV ends the claim's in-memory state (the finalizer goes when the record
// keeper sees the PV in the informer).
func (p *Provisioner) recordOutcome(uid types.UID, pv *v1.PersistentVolume) {
	if p.records != nil && pv != nil {
		p.records.done(uid, true)
	}
}

// clearOutcome says what clearing a record did.
type clearOutcome string

const (
	clearMoot      clearOutcome = "pv_exists"
	clearDeleted   clearOutcome = "deleted"
	clearNone      clearOutcome = "nothing_created"
	clearAbandoned clearOutcome = "abandoned"
)

// errRetryLater: the record cannot be cleared yet (a provision is running,
// or a PV just returned has not reached the informer).
var errRetryLater = errors.New("retry later")

// clearVolume deletes the volume a deleted claim's record says may exist:
// CreateVolume again with the claim's name and parameters (idempotent: it
// returns the volume if it exists) to learn its ID, then DeleteVolume. The
// request has no accessibility requirements and no content source: by the
// CSI spec an existing volume is returned when it is compatible with the
// capacity, capabilities and parameters, and without requirements any
// volume is accessible; a missing source cannot fail the call. class may be
// nil (deleted): then the request of the last attempt in this process is
// used, and without one the record is abandoned with a warning.
//
// It returns clearDeleted, clearNone (the driver had no room, so no volume
// of that name exists) or clearAbandoned with the reason; an error means a
// retry may do better (the driver is unavailable, slow or busy with the
// name).
func (p *Provisioner) clearVolume(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (clearOutcome, string, error) {
	req, reason := p.rebuildRequest(ctx, claim, class)
	if req == nil {
		return clearAbandoned, reason, nil
	}
	req.AccessibilityRequirements = nil
	req.VolumeContentSource = nil
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Calling CreateVolume to learn the ID of an in-flight volume", "request", protosanitizer.StripSecrets(req))
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.deps.CSI.CreateVolume(callCtx, req)
	cancel()
	switch status.Code(err) {
	case codes.OK:
	case codes.ResourceExhausted:
		return clearNone, "", nil
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Aborted:
		return "", "", fmt.Errorf("CreateVolume %q to learn its ID: %w", req.GetName(), err)
	default:
		return clearAbandoned, fmt.Sprintf("CreateVolume %q to learn its ID failed: %v", req.GetName(), err), nil
	}
	id := resp.GetVolume().GetVolumeId()
	if err := p.deleteVolume(ctx, id, req.GetSecrets()); err != nil {
		return "", "", err
	}
	p.full.freed(ctx, resp.GetVolume().GetAccessibleTopology())
	if p.deps.Capacity != nil {
		p.deps.Capacity.Touch(resp.GetVolume().GetAccessibleTopology())
	}
	logger.V(2).Info("Deleted in-flight volume", "volume", req.GetName(), "volumeID", id)
	return clearDeleted, id, nil
}

// rebuildRequest returns the CreateVolume request of a claim: from its class
// when it still exists, else the last one this process sent. nil and a
// reason when neither is possible.
func (p *Provisioner) rebuildRequest(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (*csi.CreateVolumeRequest, string) {
	if class != nil {
		opts := controller.ProvisionOptions{StorageClass: class, PVC: claim, PVName: p.pvName(claim)}
		req, err := p.buildCreateRequest(ctx, opts)
		if err == nil {
			if ref := req.secrets[secretProvisioner]; ref != nil {
				if req.csi.Secrets, err = p.readSecret(ctx, ref); err != nil {
					err = fmt.Errorf("reading provisioner secret: %w", err)
				}
			}
		}
		if err == nil {
			return req.csi, ""
		}
		if last := p.records.lastRequest(claim.UID); last != nil {
			return last, ""
		}
		return nil, fmt.Sprintf("the CreateVolume request cannot be rebuilt: %v", err)
	}
	if last := p.records.lastRequest(claim.UID); last != nil {
		return last, ""
	}
	return nil, "its StorageClass is gone, so the CreateVolume request that returns the volume's ID cannot be rebuilt"
}

// deleteInFlight deletes the volume of an earlier attempt of a claim that
// goes back to the scheduler: CreateVolume with the last request (without
// requirements) returns its ID, DeleteVolume removes it. Without a
// remembered request (protection off) the name is tried as an ID, as
// before.
func (p *Provisioner) deleteInFlight(ctx context.Context, uid types.UID, name string) error {
	last := p.records.lastRequest(uid)
	if last == nil {
		return p.deleteVolume(ctx, name, nil)
	}
	last.AccessibilityRequirements = nil
	last.VolumeContentSource = nil
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.deps.CSI.CreateVolume(callCtx, last)
	cancel()
	switch status.Code(err) {
	case codes.OK:
		return p.deleteVolume(ctx, resp.GetVolume().GetVolumeId(), last.GetSecrets())
	case codes.ResourceExhausted:
		return nil
	default:
		return fmt.Errorf("CreateVolume %q to learn its ID: %w", name, err)
	}
}
