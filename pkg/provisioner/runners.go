package provisioner

import (
	"context"

	"k8s.io/klog/v2"
)

// runner is one part of the work of the replica that provisions (the
// leader, or every replica without leader election): see leaderWork.
type runner struct {
	// name says what runs, in logs.
	name string
	// prepare, when set, runs to its end before any runner after it
	// starts.
	prepare func(ctx context.Context)
	// run runs until ctx ends. The last runner's is the work itself: the
	// work ends when it returns; the others run beside it.
	run func(ctx context.Context)
}

// leaderWork is the work of the replica that provisions, in the order it
// starts. Parts the configuration leaves out are not in the list.
//
//	| runner                  | prepare                                 | run                                        |
//	|-------------------------|-----------------------------------------|--------------------------------------------|
//	| in-flight record keeper | clears the records of claims deleted    | clears the records of claims as they are   |
//	|                         | while no replica led, before any new    | deleted                                    |
//	|                         | provisioning                            |                                            |
//	| capacity publishing     |                                         | keeps CSIStorageCapacity objects current   |
//	| source protection       |                                         | puts and removes data sources' finalizers  |
//	| node claimer            |                                         | takes immediate-binding claims (node       |
//	|                         |                                         | deployment with immediate binding)         |
//	| bind-through            |                                         | binds claims to their new PVs              |
//	| provisioning            |                                         | the library's controller: the work itself  |
func (c *Controller) leaderWork() []runner {
	var rs []runner
	if c.recordKeeper != nil {
		rs = append(rs, runner{name: "in-flight record keeper", prepare: c.recordKeeper.Reconcile, run: c.recordKeeper.Run})
	}
	if c.capacity != nil {
		rs = append(rs, runner{name: "capacity publishing", run: c.capacity.Run})
	}
	rs = append(rs, runner{name: "source protection", run: c.sources.protection.Run})
	if c.claimer != nil {
		rs = append(rs, runner{name: "node claimer", run: c.claimer.Run})
	}
	if c.binder != nil {
		rs = append(rs, runner{name: "bind-through", run: c.binder.Run})
	}
	return append(rs, runner{name: "provisioning", run: c.lib.Run})
}

// runRunners runs rs in order: each runner's prepare to its end, then its
// run in a goroutine of its own, but the last one's in the caller's;
// runRunners returns when that one does. The others end with ctx.
func runRunners(ctx context.Context, rs []runner) {
	logger := klog.FromContext(ctx)
	for i, r := range rs {
		if r.prepare != nil {
			logger.V(4).Info("Preparing", "runner", r.name)
			r.prepare(ctx)
		}
		logger.V(4).Info("Starting", "runner", r.name)
		if i == len(rs)-1 {
			r.run(ctx)
			return
		}
		go r.run(ctx)
	}
}
