package inflight

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
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
)

// claimUpdateAttempts bounds the UPDATEs of one claim write that conflict
// with a concurrent change (each after a fresh GET).
const claimUpdateAttempts = 5

// ErrClaimKeptChanging: every UPDATE of a claim write met a newer version
// of the claim. It is not a conflict on purpose: callers take a conflict
// for "the claim was replaced", and this claim was not; they retry.
var ErrClaimKeptChanging = errors.New("the claim changed before each update")

// ClaimWriter writes the provisioner's own changes of claims (the in-flight
// record and the hand-back to the scheduler), each as one strategic merge
// PATCH with the claim's UID as precondition. RBAC that grants update but
// not patch on persistentvolumeclaims (upstream external-provisioner's
// rbac.yaml) refuses that PATCH: the first such 403 switches the process
// to the same change by UPDATE, logged once, for good. An UPDATE starts
// from the claim at hand and, when the API holds a newer version
// (conflict), from a fresh GET, with the resourceVersion as precondition;
// a claim of another UID is not written (a conflict, as the PATCH's UID
// precondition gives). Safe for concurrent use.
type ClaimWriter struct {
	claims   corev1client.PersistentVolumeClaimsGetter
	byUpdate atomic.Bool
	switched sync.Once
}

// NewClaimWriter returns a ClaimWriter that writes through claims.
func NewClaimWriter(claims corev1client.PersistentVolumeClaimsGetter) *ClaimWriter {
	return &ClaimWriter{claims: claims}
}

// Change is one change of a claim, as a patch and as an edit of an object,
// which must make the same change.
type Change struct {
	// Patch is the strategic merge patch, with metadata.uid as
	// precondition.
	Patch []byte
	// Edit makes the change on a copy of the claim (for UPDATE).
	Edit func(*v1.PersistentVolumeClaim)
	// DryRun and FieldManager are the write's options.
	DryRun       []string
	FieldManager string
}

// Write changes claim (whose namespace, name and UID say which claim) and
// returns the API's answer: the claim after the change. A claim that is
// gone is NotFound; one of another UID is a conflict.
func (w *ClaimWriter) Write(ctx context.Context, claim *v1.PersistentVolumeClaim, change Change) (*v1.PersistentVolumeClaim, error) {
	if !w.byUpdate.Load() {
		got, err := w.claims.PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.StrategicMergePatchType, change.Patch,
			metav1.PatchOptions{DryRun: change.DryRun, FieldManager: change.FieldManager})
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
func (w *ClaimWriter) update(ctx context.Context, claim *v1.PersistentVolumeClaim, change Change) (*v1.PersistentVolumeClaim, error) {
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
		change.Edit(next)
		got, err := client.Update(ctx, next, metav1.UpdateOptions{DryRun: change.DryRun, FieldManager: change.FieldManager})
		if !apierrors.IsConflict(err) {
			return got, err
		}
		if current, err = client.Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("updating claim %s/%s: %w", claim.Namespace, claim.Name, ErrClaimKeptChanging)
}

// addRecord adds Finalizer to a claim. Finalizers merge in a strategic
// merge patch, so the others stay; an existing one is not added twice, and
// then the patch changes nothing (no write, no new resourceVersion).
func addRecord(uid types.UID) Change {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "finalizers": []string{Finalizer}}})
	return Change{Patch: patch, Edit: func(c *v1.PersistentVolumeClaim) {
		if !HasFinalizer(c) {
			c.Finalizers = append(c.Finalizers, Finalizer)
		}
	}}
}

// dropRecord removes Finalizer from a claim and leaves every other
// finalizer.
func dropRecord(uid types.UID) Change {
	key, value := dropRecordPatch()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, key: value}})
	return Change{Patch: patch, Edit: removeFinalizer}
}

// dropRecordPatch is the strategic-merge-patch directive, under
// "metadata", that removes Finalizer and leaves every other finalizer.
func dropRecordPatch() (key string, value []string) {
	return "$deleteFromPrimitiveList/finalizers", []string{Finalizer}
}

// removeFinalizer removes Finalizer from a claim and leaves every other
// finalizer.
func removeFinalizer(c *v1.PersistentVolumeClaim) {
	c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == Finalizer })
}

// Label is a label a Change sets, or removes when Value is "".
type Label struct{ Key, Value string }

// HandBack removes volume.kubernetes.io/selected-node from a claim (the
// library's reschedule, a hand-back to the scheduler) and, withRecord, its
// in-flight record. With label set (node deployment), the same write sets
// or removes that label. opts are the library's update options.
func HandBack(uid types.UID, withRecord bool, label *Label, opts metav1.UpdateOptions) Change {
	meta := map[string]any{"uid": uid, "annotations": map[string]any{volume.AnnSelectedNode: nil}}
	if withRecord {
		key, value := dropRecordPatch()
		meta[key] = value
	}
	if label != nil {
		var v any
		if label.Value != "" {
			v = label.Value
		}
		meta["labels"] = map[string]any{label.Key: v}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	return Change{Patch: patch, DryRun: opts.DryRun, FieldManager: opts.FieldManager, Edit: func(c *v1.PersistentVolumeClaim) {
		delete(c.Annotations, volume.AnnSelectedNode)
		if withRecord {
			removeFinalizer(c)
		}
		if label != nil {
			setLabel(c, *label)
		}
	}}
}

// setLabel sets a label on a claim, or removes it when its value is "".
func setLabel(c *v1.PersistentVolumeClaim, l Label) {
	if l.Value == "" {
		delete(c.Labels, l.Key)
		return
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[l.Key] = l.Value
}
