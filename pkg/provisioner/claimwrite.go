package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// claimUpdateAttempts bounds the UPDATEs of one claim write that conflict
// with a concurrent change (each after a fresh GET).
const claimUpdateAttempts = 5

// errClaimKeptChanging: every UPDATE of a claim write met a newer version
// of the claim. It is not a conflict on purpose: callers take a conflict
// for "the claim was replaced", and this claim was not; they retry.
var errClaimKeptChanging = errors.New("the claim changed before each update")

// claimWriter writes the provisioner's own changes of claims (the in-flight
// record and the hand-back to the scheduler), each as one strategic merge
// PATCH with the claim's UID as precondition. RBAC that grants update but
// not patch on persistentvolumeclaims (upstream external-provisioner's
// rbac.yaml) refuses that PATCH: the first such 403 switches the process
// to the same change by UPDATE, logged once, for good. An UPDATE starts
// from the claim at hand and, when the API holds a newer version
// (conflict), from a fresh GET, with the resourceVersion as precondition;
// a claim of another UID is not written (a conflict, as the PATCH's UID
// precondition gives). Safe for concurrent use.
type claimWriter struct {
	claims   corev1client.PersistentVolumeClaimsGetter
	byUpdate atomic.Bool
	switched sync.Once
}

func newClaimWriter(claims corev1client.PersistentVolumeClaimsGetter) *claimWriter {
	return &claimWriter{claims: claims}
}

// claimChange is one change of a claim, as a patch and as an edit of an
// object, which must make the same change.
type claimChange struct {
	// patch is the strategic merge patch, with metadata.uid as
	// precondition.
	patch []byte
	// edit makes the change on a copy of the claim (for UPDATE).
	edit func(*v1.PersistentVolumeClaim)
	// dryRun and fieldManager are the write's options.
	dryRun       []string
	fieldManager string
}

// write changes claim (whose namespace, name and UID say which claim) and
// returns the API's answer: the claim after the change. A claim that is
// gone is NotFound; one of another UID is a conflict.
func (w *claimWriter) write(ctx context.Context, claim *v1.PersistentVolumeClaim, change claimChange) (*v1.PersistentVolumeClaim, error) {
	if !w.byUpdate.Load() {
		got, err := w.claims.PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.StrategicMergePatchType, change.patch,
			metav1.PatchOptions{DryRun: change.dryRun, FieldManager: change.fieldManager})
		if !patchRefused(err) {
			return got, err
		}
		w.switched.Do(func() {
			klog.FromContext(ctx).Info("Claims may not be patched (RBAC); writing the in-flight record and hand-backs with UPDATE: grant patch on persistentvolumeclaims to go back to one request",
				"err", err)
		})
		w.byUpdate.Store(true)
	}
	return w.update(ctx, claim, change)
}

// patchRefused reports whether err is the authorizer's refusal of a PATCH
// (the API server's "cannot patch resource" message), not an admission
// plugin's 403 about this one claim.
func patchRefused(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot patch resource")
}

// update makes the change by UPDATE: from the claim at hand, then from a
// fresh GET after each conflict.
func (w *claimWriter) update(ctx context.Context, claim *v1.PersistentVolumeClaim, change claimChange) (*v1.PersistentVolumeClaim, error) {
	client := w.claims.PersistentVolumeClaims(claim.Namespace)
	current := claim
	var err error
	if current.ResourceVersion == "" {
		// Without a version the UPDATE would be unconditional.
		if current, err = client.Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
	for range claimUpdateAttempts {
		if current.UID != claim.UID {
			return nil, apierrors.NewConflict(v1.Resource("persistentvolumeclaims"), claim.Name,
				fmt.Errorf("the claim was replaced: UID %s, not %s", current.UID, claim.UID))
		}
		next := current.DeepCopy()
		change.edit(next)
		got, err := client.Update(ctx, next, metav1.UpdateOptions{DryRun: change.dryRun, FieldManager: change.fieldManager})
		if !apierrors.IsConflict(err) {
			return got, err
		}
		if current, err = client.Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("updating claim %s/%s: %w", claim.Namespace, claim.Name, errClaimKeptChanging)
}

// addRecord adds InFlightRecordFinalizer to a claim. Finalizers merge in a
// strategic merge patch, so the others stay; an existing one is not added
// twice, and then the patch changes nothing (no write, no new
// resourceVersion).
func addRecord(uid types.UID) claimChange {
	return claimChange{patch: finalizerPatch(uid), edit: func(c *v1.PersistentVolumeClaim) {
		if !HasInFlightFinalizer(c) {
			c.Finalizers = append(c.Finalizers, InFlightRecordFinalizer)
		}
	}}
}

// dropRecord removes InFlightRecordFinalizer from a claim and leaves every other
// finalizer.
func dropRecord(uid types.UID) claimChange {
	return claimChange{patch: removeFinalizerPatch(uid), edit: removeInFlightFinalizer}
}

func removeInFlightFinalizer(c *v1.PersistentVolumeClaim) {
	c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == InFlightRecordFinalizer })
}

// dropSelectedNode removes volume.kubernetes.io/selected-node from a claim (a
// reschedule) and, with withRecord, its in-flight record. With label set
// (node deployment), the same write sets nodelabel.Key to *label, or
// removes it when *label is "" (see handBackLabel).
func dropSelectedNode(uid types.UID, withRecord bool, label *string, opts metav1.UpdateOptions) claimChange {
	meta := map[string]any{"uid": uid, "annotations": map[string]any{annSelectedNode: nil}}
	if withRecord {
		meta["$deleteFromPrimitiveList/finalizers"] = []string{InFlightRecordFinalizer}
	}
	if label != nil {
		var v any
		if *label != "" {
			v = *label
		}
		meta["labels"] = map[string]any{nodelabel.Key: v}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	return claimChange{patch: patch, dryRun: opts.DryRun, fieldManager: opts.FieldManager, edit: func(c *v1.PersistentVolumeClaim) {
		delete(c.Annotations, annSelectedNode)
		if withRecord {
			removeInFlightFinalizer(c)
		}
		if label != nil {
			setLabel(&c.ObjectMeta, nodelabel.Key, *label)
		}
	}}
}

// setLabel sets a label, or removes it when value is "".
func setLabel(m *metav1.ObjectMeta, key, value string) {
	if value == "" {
		delete(m.Labels, key)
		return
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[key] = value
}
