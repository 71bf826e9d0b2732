package provisioner

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// withRecordGuard returns the clientset the provisioning library is given
// when the in-flight record is on. It changes two calls of the library:
//
//   - A PV create that returns AlreadyExists, which the library takes for
//     success (upstream external-provisioner #1469), is resolved: the
//     existing PV is read from the API; if it holds this very volume for
//     this claim and is not going away, the create is done. Otherwise
//     another volume holds the name (the claim's earlier volume, deleted
//     with its PV, or a PV someone else made): the new volume is deleted,
//     a VolumeNameTaken Event says so, and the library is told the PV
//     exists. A failed DeleteVolume returns an error, so that the library
//     retries the create, and the resolution with it.
//   - The library's claim Update that removes volume.kubernetes.io/selected-node
//     (a reschedule) becomes a PATCH of that annotation: the record's
//     PATCH before CreateVolume has changed the claim's resourceVersion, so
//     the library's Update of the claim it holds would conflict. Where RBAC
//     refuses the PATCH, claimWriter sends an UPDATE of the API's current
//     claim instead.
func withRecordGuard(client kubernetes.Interface, p *Provisioner, recorder record.EventRecorder) kubernetes.Interface {
	return &guardClient{Interface: client, core: &guardCoreV1{CoreV1Interface: client.CoreV1(), p: p, recorder: recorder}}
}

type guardClient struct {
	kubernetes.Interface
	core corev1client.CoreV1Interface
}

func (c *guardClient) CoreV1() corev1client.CoreV1Interface { return c.core }

type guardCoreV1 struct {
	corev1client.CoreV1Interface
	p        *Provisioner
	recorder record.EventRecorder
}

func (c *guardCoreV1) PersistentVolumes() corev1client.PersistentVolumeInterface {
	return &guardPVs{PersistentVolumeInterface: c.CoreV1Interface.PersistentVolumes(), c: c}
}

func (c *guardCoreV1) PersistentVolumeClaims(namespace string) corev1client.PersistentVolumeClaimInterface {
	return &guardClaims{PersistentVolumeClaimInterface: c.CoreV1Interface.PersistentVolumeClaims(namespace), dropRecord: c.p.cfg.Node != nil,
		writes: c.p.records.writes, p: c.p}
}

type guardPVs struct {
	corev1client.PersistentVolumeInterface
	c *guardCoreV1
}

// Create creates pv and resolves AlreadyExists (see withRecordGuard).
func (g *guardPVs) Create(ctx context.Context, pv *v1.PersistentVolume, opts metav1.CreateOptions) (*v1.PersistentVolume, error) {
	out, err := g.PersistentVolumeInterface.Create(ctx, pv, opts)
	if !apierrors.IsAlreadyExists(err) || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != g.c.p.cfg.DriverName {
		return out, err
	}
	if rerr := g.resolve(ctx, pv); rerr != nil {
		return nil, rerr
	}
	return out, err
}

// resolve decides about a PV create that found the name taken.
func (g *guardPVs) resolve(ctx context.Context, pv *v1.PersistentVolume) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pv", pv.Name, "volumeHandle", pv.Spec.CSI.VolumeHandle)
	existing, err := g.PersistentVolumeInterface.Get(ctx, pv.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Gone meanwhile: the library's retry of the create will succeed.
		return fmt.Errorf("PV %q existed and is gone, creating it again", pv.Name)
	}
	if err != nil {
		return fmt.Errorf("reading PV %q that already exists: %w", pv.Name, err)
	}
	if holdsSameVolume(existing, pv) {
		logger.V(2).Info("PV already exists for this volume and claim")
		return nil
	}
	if heldByOtherClaim(existing, pv) {
		return g.nameCollision(ctx, pv, existing)
	}
	logger.Info("PV name held by another volume, deleting the new volume", "existingVolumeHandle", handleOf(existing),
		"existingDeleting", existing.DeletionTimestamp != nil, "existingPhase", existing.Status.Phase)
	if err := g.c.p.delete(ctx, pv, false); err != nil {
		return fmt.Errorf("PV %q is held by another volume; deleting new volume %q: %w", pv.Name, pv.Spec.CSI.VolumeHandle, err)
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		if g.c.p.deps.Decisions != nil {
			g.c.p.deps.Decisions.RecordVolumeDeleted(ref.UID)
		}
		claim := &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
		g.c.recorder.Eventf(claim, v1.EventTypeWarning, ReasonVolumeNameTaken,
			"PV %q already exists for volume %q (being deleted: %t), not for the new volume %q, which was deleted; the claim is provisioned again once that PV is gone",
			pv.Name, handleOf(existing), existing.DeletionTimestamp != nil, pv.Spec.CSI.VolumeHandle)
	}
	return nil
}

// holdsSameVolume: existing is the PV we meant to create, alive: same
// driver and volume handle, same claim, not being deleted or released.
func holdsSameVolume(existing, want *v1.PersistentVolume) bool {
	if existing.Spec.CSI == nil || existing.Spec.CSI.Driver != want.Spec.CSI.Driver ||
		existing.Spec.CSI.VolumeHandle != want.Spec.CSI.VolumeHandle {
		return false
	}
	if existing.DeletionTimestamp != nil || existing.Status.Phase == v1.VolumeReleased || existing.Status.Phase == v1.VolumeFailed {
		return false
	}
	if want.Spec.ClaimRef == nil {
		return true
	}
	return existing.Spec.ClaimRef != nil && existing.Spec.ClaimRef.UID == want.Spec.ClaimRef.UID
}

// heldByOtherClaim: existing holds the very volume we meant to give a PV,
// for another claim (or none). With --volume-name-uuid-length two claims
// can have the same volume name, and the driver then returns the first
// claim's volume to the second's CreateVolume: that volume is not ours to
// delete, whatever the state of its PV.
func heldByOtherClaim(existing, want *v1.PersistentVolume) bool {
	if existing.Spec.CSI == nil || existing.Spec.CSI.Driver != want.Spec.CSI.Driver ||
		existing.Spec.CSI.VolumeHandle != want.Spec.CSI.VolumeHandle || want.Spec.ClaimRef == nil {
		return false
	}
	return existing.Spec.ClaimRef == nil || existing.Spec.ClaimRef.UID != want.Spec.ClaimRef.UID
}

// nameCollision leaves the volume of another claim's PV alone: the PV is
// not created, nothing is deleted, and a VolumeNameTaken Event tells the
// claim (Provision refuses the claim from then on: checkExistingPV).
func (g *guardPVs) nameCollision(ctx context.Context, pv, existing *v1.PersistentVolume) error {
	owner := "no claim"
	if ref := existing.Spec.ClaimRef; ref != nil {
		owner = fmt.Sprintf("claim %s/%s (UID %s)", ref.Namespace, ref.Name, ref.UID)
	}
	klog.FromContext(ctx).Error(nil, "The volume's name is that of another claim's volume; leaving that volume alone", "pv", pv.Name,
		"volumeHandle", pv.Spec.CSI.VolumeHandle, "owner", owner)
	ref := pv.Spec.ClaimRef
	if g.c.p.deps.Decisions != nil {
		g.c.p.deps.Decisions.RecordNameTaken(ref.UID)
	}
	claim := &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	g.c.recorder.Eventf(claim, v1.EventTypeWarning, ReasonVolumeNameTaken,
		"PV %q already exists for volume %q of %s: the name of this claim's volume is the same, and the driver returned that volume; it was left alone. Recreate the claim (it gets a new UID), or use a longer --volume-name-uuid-length",
		pv.Name, handleOf(existing), owner)
	return nil
}

func handleOf(pv *v1.PersistentVolume) string {
	if pv.Spec.CSI == nil {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
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
	writes *claimWriter
	p      *Provisioner
}

// Update sends a claim without volume.kubernetes.io/selected-node (the
// library's reschedule, its only claim update) as a PATCH removing that
// annotation (and, with node deployment or when no volume of the claim's
// name exists, the in-flight record), with the
// claim's UID as precondition (where RBAC refuses the PATCH, an UPDATE from
// the API's current claim: see claimWriter); anything else as is.
func (g *guardClaims) Update(ctx context.Context, claim *v1.PersistentVolumeClaim, opts metav1.UpdateOptions) (*v1.PersistentVolumeClaim, error) {
	if _, ok := claim.Annotations[annSelectedNode]; ok || claim.UID == "" {
		return g.PersistentVolumeClaimInterface.Update(ctx, claim, opts)
	}
	// A claim whose last CreateVolume said that no volume of its name
	// exists loses its record with the same write.
	absent := g.p != nil && g.p.records.isAbsent(claim.UID)
	got, err := g.writes.write(ctx, claim, dropSelectedNode(claim.UID, g.dropRecord || absent, g.handBackLabel(claim), opts))
	if err == nil && absent && len(opts.DryRun) == 0 {
		g.p.records.done(claim.UID, false)
	}
	return got, err
}

// handBackLabel is the node label a claim handed back gets with node
// deployment (nil: the label is left alone): the pool's for a claim of an
// immediate-binding class, none otherwise (handBackLabel). A class the
// cache does not hold leaves the label to csi-node-router.
func (g *guardClaims) handBackLabel(claim *v1.PersistentVolumeClaim) *string {
	if g.p == nil || g.p.cfg.Node == nil || g.p.deps.Classes == nil {
		return nil
	}
	class, err := g.p.deps.Classes.Get(ptr.Deref(claim.Spec.StorageClassName, ""))
	if err != nil {
		return nil
	}
	v := handBackLabel(g.p.cfg.DriverName, class)
	return &v
}
