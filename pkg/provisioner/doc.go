// Package provisioner implements the sig-storage-lib-external-provisioner v10
// controller.Provisioner for a CSI driver, with end-to-end topology awareness.
//
// For a claim of a WaitForFirstConsumer class, Provision derives the CSI
// accessibility requirements from the scheduler's selected node (its topology
// labels for the keys its CSINode entry lists) intersected with the class's
// allowedTopologies (package topology), calls CreateVolume with a
// deterministic name, and returns a PersistentVolume whose nodeAffinity is
// built from the volume's accessible topology.
//
// Errors are mapped onto the library's ProvisioningState so that a claim whose
// selected node can never host the volume goes back to the scheduler
// (ProvisioningReschedule), transient driver errors are retried with the same
// volume name (ProvisioningInBackground), and everything else is reported once
// as a final error with an Event that an operator can act on. A selected
// node's segment where the driver found no room is remembered per class for
// a while (Config.FullSegmentHold): claims on nodes there go back to the
// scheduler without a CreateVolume, and are then asked for that segment
// only, so that a pod pinned to a full zone does not make the driver create
// and delete a volume elsewhere on every scheduling attempt. A claim the
// driver refused with INVALID_ARGUMENT is retried only after the longest
// backoff (SlowRetries). A PV's volume is not deleted while a
// VolumeAttachment names the PV (AttachmentIndex).
//
// StorageClass, Node, CSINode, PV and PVC objects are read from informers of
// one shared informer factory (see Controller). The API GETs, made here or
// by package inflight for the provisioner, are for what no informer holds,
// or not yet:
//   - the provisioner secret a class names (Deps.Secrets), for each
//     CreateVolume and DeleteVolume that needs it: Secrets are not cached,
//     so that the provisioner needs no watch of every Secret of the
//     cluster, as upstream;
//   - a PV whose create found its name taken (inflight.NameGuard on the
//     library's PV create): the informer may not have seen that PV yet;
//   - a claim after an UPDATE conflict, or one without a resourceVersion,
//     where RBAC refuses claim PATCHes and the record and the hand-back
//     write claims by UPDATE (inflight.ClaimWriter): the conflict says the
//     cached copy is stale;
//   - a restore's VolumeSnapshotContent where the contents may not be
//     watched, and a claim's VolumeAttributesClass where that API may not be
//     listed and watched (Sources): without a watch there is no informer,
//     so each attempt reads it, as upstream.
//
// docs/design.md lists the GETs of every binary ("No API GET for what an
// informer holds").
package provisioner
