// Package inflight is the in-flight record: the durable note, on a claim,
// that a volume of the claim's deterministic name may exist in the driver
// without a PV (the finalizer [Finalizer]).
//
// Its surface is three steps, called by the provisioner's core:
//
//   - open: [Records.Open] writes the record on the claim (one PATCH, or an
//     UPDATE where RBAC refuses the PATCH: [ClaimWriter]) before each
//     CreateVolume, and refuses a claim that is gone, being deleted, bound or
//     selected for another node ([ErrClaimGoneOrDeleting]);
//   - done: [Records.Returned] once a provision returned a PV; the [Keeper]
//     removes the finalizer as soon as the PV informer shows a PV of the claim;
//   - clear: the [Keeper] clears what is left: the record of a claim deleted
//     without a PV goes once the core's [Volumes.Clear] has deleted the volume
//     of its name, and [Keeper.DropAbsent] and [Keeper.RemoveAll] remove the
//     records of a stopping process and of a rollback to upstream.
//
// The package never reads the core's internals: what it needs of the core
// (the volume name, the claim's class, clearing a volume through the driver)
// comes through [Volumes].
package inflight
