// Package bindthrough completes the binding of a claim to the PV that
// csi-provisioner created for it, writing exactly what
// kube-controller-manager's PV controller writes when it binds a claim to a
// PV that names it in its claimRef (pv_controller.go's bind), so that the PV
// controller, when it gets to the pair, finds nothing left to write.
//
// Why: a claim is Bound, and its pod may leave Pending, only when the PV
// controller has bound it, and that controller binds one claim at a time
// with three writes each. Binder does the same writes in parallel workers,
// right after the PV exists.
//
// The PV already names the claim, UID included (csi-provisioner creates it
// so), so the PV controller's first step, completing the PV's claimRef,
// writes nothing for such a PV and is not taken here. What Binder writes,
// in the PV controller's order, each an UPDATE that carries
// the resourceVersion of the object it read (from the informers, or the one
// its previous write returned):
//
//	PV status     phase Bound, message ""
//	claim         spec.volumeName = PV's name, annotations
//	              pv.kubernetes.io/bound-by-controller: "yes" (when it sets
//	              volumeName) and pv.kubernetes.io/bind-completed: "yes";
//	              in the same write, the finalizers of Config.DropFinalizers
//	              (csi-provisioner's in-flight record, which may go once the
//	              PV exists) are removed, which the PV controller never does
//	claim status  phase Bound, accessModes = PV's, capacity = PV's (only
//	              when the claim becomes Bound), currentVolumeAttributesClassName
//	              = PV's volumeAttributesClassName (Pending → Bound only)
//
// A claim that is not bound yet and shows none of Config.DropFinalizers
// while its PV is younger than Config.RecordWait is an informer's copy
// older than the in-flight record, which csi-provisioner writes before the
// PV: its write would conflict, so it waits for the claim's next event.
//
// A conflict (the PV controller, or another writer, changed the object)
// ends the attempt; the pair is tried again from the informers' newer copy
// as soon as they show it (the object's next event queues the PV), and
// every step skips what is already written, so the end state is the same
// whoever wins. No write is sent from a copy that a write of the binder
// replaced or found replaced: the informers' echo of the binder's own
// writes, which queues the PV again, causes no conflict. A pair that is not plainly this claim's own new PV
// (another driver's PV, a claim being deleted, a claim of another UID or
// bound elsewhere, a class or volume mode mismatch, a PV being released)
// is left to the PV controller.
//
// Without the RBAC it needs (update on persistentvolumes/status and
// persistentvolumeclaims/status), Binder logs one line and leaves binding
// to the PV controller, trying again a minute later.
package bindthrough
