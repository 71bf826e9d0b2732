package inflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// Finalizer is the finalizer that records, on a claim, that a volume of the
// claim's deterministic name may exist in the driver. It is added in one
// PATCH before the first CreateVolume of the claim and removed as soon as a
// PV of the claim exists, or, for a claim deleted before it got one, once
// DeleteVolume of that name has succeeded (docs/operations.md, "The
// in-flight record"): bound claims do not keep it, so that upstream
// external-provisioner, which never removes it, can take over. The name
// follows upstream external-provisioner's claim finalizers
// (provisioner.storage.kubernetes.io/cloning-protection).
const Finalizer = contract.InFlightRecordFinalizer

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

// ErrClaimGoneOrDeleting stops a provision whose claim is gone, being
// deleted or already bound: no CreateVolume may run for it.
var ErrClaimGoneOrDeleting = errors.New("claim is gone, being deleted or already bound")

// ErrClaimSelectedElsewhere stops a node deployment's provision of a claim
// that the API shows selected for another node. It wraps
// ErrClaimGoneOrDeleting.
var ErrClaimSelectedElsewhere = fmt.Errorf("%w: claim selected for another node", ErrClaimGoneOrDeleting)

// recentSuccess is how long a claim whose provision just returned a PV waits
// for that PV to appear in the informer before its record is treated as
// open: the library creates the PV right after Provision returns.
const recentSuccess = 2 * time.Minute

// Config configures Records.
type Config struct {
	// Claims writes the record on claims. nil switches the record off
	// (NewRecords returns nil), which is unsafe: a volume created before a
	// crash or a race can leak.
	Claims corev1client.PersistentVolumeClaimsGetter
	// Owns, with node deployment, tells whether a claim is this instance's
	// (selected for its node): Open refuses another node's claim, from the
	// API's answer. nil: every claim is.
	Owns func(*v1.PersistentVolumeClaim) bool
	// Node is the instance's node with node deployment, for messages.
	Node string
}

// Records is the provisioner's side of the durable in-flight record: the
// claim PATCH before CreateVolume, the claims being provisioned right now,
// and the last request per claim (to ask for a volume again by name). Safe
// for concurrent use. A nil *Records records nothing (the record is off):
// its methods do nothing and report nothing.
type Records struct {
	// writes writes the record (and, for the core's guard, hand-backs).
	writes *ClaimWriter
	owns   func(*v1.PersistentVolumeClaim) bool
	node   string

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
	// said that no volume of their name exists (VolumeAbsent), until their
	// next attempt: their record may go (see Keeper.DropAbsent).
	absent map[types.UID]*v1.PersistentVolumeClaim
}

// NewRecords returns the record of cfg, or nil when cfg.Claims is nil (the
// record is off).
func NewRecords(cfg Config) *Records {
	if cfg.Claims == nil {
		return nil
	}
	owns := cfg.Owns
	if owns == nil {
		owns = func(*v1.PersistentVolumeClaim) bool { return true }
	}
	return &Records{writes: NewClaimWriter(cfg.Claims), owns: owns, node: cfg.Node, busy: map[types.UID]bool{},
		requests: map[types.UID]*csi.CreateVolumeRequest{}, succeeded: map[types.UID]time.Time{}, absent: map[types.UID]*v1.PersistentVolumeClaim{}}
}

// Writer returns the writer of the record's claim changes, which the core's
// hand-back to the scheduler shares (nil when the record is off).
func (f *Records) Writer() *ClaimWriter {
	if f == nil {
		return nil
	}
	return f.writes
}

// Enter marks a claim as being provisioned; the returned function ends it.
func (f *Records) Enter(uid types.UID) func() {
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
func (f *Records) tryClaim(uid types.UID) (func(), bool) {
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

func (f *Records) remember(uid types.UID, req *csi.CreateVolumeRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[uid] = proto.Clone(req).(*csi.CreateVolumeRequest)
	delete(f.absent, uid)
}

// LastRequest returns a copy of the last CreateVolume request of the claim
// that Open recorded in this process, or nil.
func (f *Records) LastRequest(uid types.UID) *csi.CreateVolumeRequest {
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

// Returned notes that a provision of the claim returned a PV: the claim's
// in-memory state ends (the finalizer goes when the Keeper sees the PV).
func (f *Records) Returned(uid types.UID) {
	if f != nil {
		f.done(uid, true)
	}
}

// Forget forgets a claim whose record is cleared (or handed back with the
// claim).
func (f *Records) Forget(uid types.UID) {
	if f != nil {
		f.done(uid, false)
	}
}

// done forgets a claim whose volume got a PV (pvReturned) or whose record
// is cleared.
func (f *Records) done(uid types.UID, pvReturned bool) {
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

func (f *Records) recentlySucceeded(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.succeeded[uid]
	return ok && time.Since(t) <= recentSuccess
}

// HasFinalizer reports whether a claim carries Finalizer.
func HasFinalizer(claim *v1.PersistentVolumeClaim) bool {
	return slices.Contains(claim.Finalizers, Finalizer)
}

// Open writes the record before a CreateVolume: one PATCH of the claim (an
// UPDATE where RBAC refuses the PATCH, see ClaimWriter), every attempt, so
// that the answer comes from the API and not from a cache that may be late.
// The API refuses a new finalizer on a claim being deleted, and a claim
// that is gone or was replaced (other UID) fails the patch: then no
// CreateVolume may run (ErrClaimGoneOrDeleting). A claim that already
// carries the finalizer is not written again.
func (f *Records) Open(ctx context.Context, claim *v1.PersistentVolumeClaim, req *csi.CreateVolumeRequest) error {
	if f == nil {
		return nil
	}
	got, err := f.writes.Write(ctx, claim, addRecord(claim.UID))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return fmt.Errorf("%w: %v", ErrClaimGoneOrDeleting, err)
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		// "no new finalizers can be added if the object is being deleted"
		if claim.DeletionTimestamp != nil || apierrors.IsInvalid(err) {
			return fmt.Errorf("%w: %v", ErrClaimGoneOrDeleting, err)
		}
		return fmt.Errorf("recording the in-flight volume %q on the claim: %w", req.GetName(), err)
	case err != nil:
		return fmt.Errorf("recording the in-flight volume %q on the claim: %w", req.GetName(), err)
	case got.UID != claim.UID || got.DeletionTimestamp != nil || got.Spec.VolumeName != "":
		return ErrClaimGoneOrDeleting
	case !f.owns(got):
		// Node deployment: the answer of the API, not of a cache, decides
		// which node's instance may create the volume.
		return fmt.Errorf("%w: selected for node %q, not %q", ErrClaimSelectedElsewhere, got.Annotations[volume.AnnSelectedNode], f.node)
	}
	f.remember(claim.UID, req)
	return nil
}

// VolumeAbsent reports whether a failed CreateVolume says that no volume of
// the request's name exists in the driver. By the CSI spec, CreateVolume of
// an existing name returns that volume when it is compatible, ALREADY_EXISTS
// when it is not, and ABORTED while an operation on the name is pending; so
// any other gRPC error, final (upstream external-provisioner's
// isFinalError) or RESOURCE_EXHAUSTED, means that no volume of that name
// exists. Timeouts, cancellations, UNAVAILABLE and errors that are not gRPC
// statuses (the call may not have reached the driver, or may still run
// there) say nothing.
func VolumeAbsent(err error) bool {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return false
	}
	switch st.Code() {
	case codes.OK, codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Aborted, codes.AlreadyExists:
		return false
	}
	return true
}

// MarkAbsent notes that the claim's last CreateVolume said that no volume
// of its name exists (VolumeAbsent).
func (f *Records) MarkAbsent(claim *v1.PersistentVolumeClaim) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absent[claim.UID] = claim
}

// IsAbsent reports whether the claim's last CreateVolume in this process
// said that no volume of its name exists, with no attempt since.
func (f *Records) IsAbsent(uid types.UID) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.absent[uid] != nil
}

// absentClaims returns the claims of IsAbsent that no provision works on.
func (f *Records) absentClaims() []*v1.PersistentVolumeClaim {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*v1.PersistentVolumeClaim
	for uid, c := range f.absent {
		if !f.busy[uid] {
			out = append(out, c)
		}
	}
	return out
}

// AwaitingPV counts the claims whose provision returned a PV recently and
// whose record has not been removed yet: the library is creating the PV, or
// the Keeper has not seen it.
func (f *Records) AwaitingPV() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.succeeded {
		if time.Since(t) <= recentSuccess {
			n++
		}
	}
	return n
}
