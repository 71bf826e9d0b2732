package provisioner

import (
	"context"
	"errors"
	"time"

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
	return p.calls.Load() == 0 && p.records.get().AwaitingPV() == 0
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
		dropped = c.recordKeeper.DropAbsent(dropCtx)
		open = c.recordKeeper.OpenRecords()
	}
	logger.Info("Stopped provisioning; claims with an open record keep it (docs/operations.md, \"The in-flight record\")", "finished", err == nil, "duration", time.Since(start).Round(time.Millisecond),
		"provisionsCancelled", p.calls.Load(), "recordsOfAbsentVolumesRemoved", dropped, "openRecords", open)
}
