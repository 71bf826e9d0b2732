package provisioner

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// DefaultDrainTimeout is how long a stopping Controller lets the
// CreateVolume calls in flight finish (ControllerConfig.DrainTimeout): twice
// the default --timeout of one CSI call, and below the 30 s a pod gets by
// default between SIGTERM and SIGKILL (terminationGracePeriodSeconds).
const DefaultDrainTimeout = 20 * time.Second

// drainWrites bounds the removal of records after the drain's wait.
const drainWrites = 5 * time.Second

// drainPoll is how often a stopping Controller checks whether its calls
// have finished.
const drainPoll = 100 * time.Millisecond

// errStopping refuses a provision that would start a CreateVolume while the
// process stops.
var errStopping = errors.New("the provisioner is stopping: no new CreateVolume")

// volumeAbsent reports whether a failed CreateVolume says that no volume of
// the request's name exists in the driver. By the CSI spec, CreateVolume of
// an existing name returns that volume when it is compatible, ALREADY_EXISTS
// when it is not, and ABORTED while an operation on the name is pending; so
// any other gRPC error, final (upstream external-provisioner's
// isFinalError) or RESOURCE_EXHAUSTED, means that no volume of that name
// exists. Timeouts, cancellations, UNAVAILABLE and errors that are not gRPC
// statuses (the call may not have reached the driver, or may still run
// there) say nothing.
func volumeAbsent(err error) bool {
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

// markAbsent notes that the claim's last CreateVolume said that no volume of
// its name exists.
func (f *inFlightRecords) markAbsent(claim *v1.PersistentVolumeClaim) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absent[claim.UID] = claim
}

// isAbsent reports whether the claim's last CreateVolume in this process
// said that no volume of its name exists, with no attempt since.
func (f *inFlightRecords) isAbsent(uid types.UID) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.absent[uid] != nil
}

// absentClaims returns the claims of isAbsent that no provision works on.
func (f *inFlightRecords) absentClaims() []*v1.PersistentVolumeClaim {
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

// awaitingPV counts the claims whose provision returned a PV recently and
// whose record has not been removed yet: the library is creating the PV, or
// the record keeper has not seen it.
func (f *inFlightRecords) awaitingPV() int {
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

// refuseWhileStopping refuses a provision once the process stops: the drain
// waits for the calls in flight, it starts none (a retry of a claim whose
// last call timed out would hold the stop for as long again).
func (p *Provisioner) refuseWhileStopping() error {
	if !p.stopping.Load() {
		return nil
	}
	return &controller.IgnoredError{Reason: errStopping.Error()}
}

// settled reports whether no provision runs and every PV a provision
// returned has been created and has freed its claim of the record.
func (p *Provisioner) settled() bool {
	return p.calls.Load() == 0 && p.records.awaitingPV() == 0
}

// dropAbsent removes the record of every claim whose last CreateVolume said
// that no volume of its name exists (see volumeAbsent). While the process
// runs such a record stays until the claim's next attempt, which writes it
// again; a process that stops leaves none behind for upstream
// external-provisioner, which never removes it.
func (k *inFlightRecordKeeper) dropAbsent(ctx context.Context) int {
	n := 0
	for _, claim := range k.p.records.absentClaims() {
		done, ok := k.p.records.tryClaim(claim.UID)
		if !ok {
			continue
		}
		logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
		if err := k.release(klog.NewContext(ctx, logger), claim, clearNone); err != nil {
			logger.Error(err, "Keeping the in-flight record")
		} else {
			n++
		}
		done()
	}
	return n
}

// drain is what a leading Controller does once asked to stop, before its
// informers, leader election and the library end: no CreateVolume starts,
// the calls in flight get up to DrainTimeout to finish (the
// library creates their PVs and the record keeper removes their records),
// and then (within drainWrites) the records of claims whose volume is
// known not to exist are removed. A call still running at the deadline is cancelled and its
// claim keeps the record: its volume may exist. What is left is logged.
func (c *Controller) drain(ctx context.Context) {
	p := c.provisioner
	p.stopping.Store(true)
	if !c.leading.Load() {
		return
	}
	logger := klog.FromContext(ctx)
	start := time.Now()
	logger.Info("Stopping: CreateVolume calls in flight may finish first", "provisions", p.calls.Load(), "timeout", c.cfg.DrainTimeout)
	pollCtx, cancel := context.WithTimeout(ctx, c.cfg.DrainTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(pollCtx, drainPoll, true, func(context.Context) (bool, error) { return p.settled(), nil })
	dropped, open := 0, 0
	if c.recordKeeper != nil {
		dropCtx, cancel := context.WithTimeout(ctx, drainWrites)
		defer cancel()
		dropped = c.recordKeeper.dropAbsent(dropCtx)
		open = c.recordKeeper.openRecords()
	}
	logger.Info("Stopped provisioning; claims with an open record keep it (docs/operations.md, \"The in-flight record\")", "finished", err == nil, "duration", time.Since(start).Round(time.Millisecond),
		"provisionsCancelled", p.calls.Load(), "recordsOfAbsentVolumesRemoved", dropped, "openRecords", open)
}

// openRecords counts the claims of the keeper's records that are open (the
// in_flight_records metric).
func (k *inFlightRecordKeeper) openRecords() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.open)
}
