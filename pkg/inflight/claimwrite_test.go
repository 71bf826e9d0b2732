package inflight

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakeclaims"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// switchLog is the start of the line that says, once, that claims are
// written by UPDATE.
const switchLog = "Claims may not be patched (RBAC)"

// kept gives a claim a finalizer and an annotation of others, which every
// write must keep.
func kept(c claimBuilder) claimBuilder {
	fakeclaims.MarkByOthers(c.PersistentVolumeClaim)
	return c
}

// TestClaimWriterFallback: the first PATCH the authorizer refuses switches
// the process to UPDATE, said once; an UPDATE that meets a newer claim is
// retried from a fresh GET; an admission plugin's 403 is an answer, not a
// switch.
func TestClaimWriterFallback(t *testing.T) {
	tests := []struct {
		name string
		// refuse answers every PATCH (nil: allowed).
		refuse error
		// conflicts is how many UPDATEs conflict besides stale versions.
		conflicts   int32
		wantPatches int32
		wantUpdates int32
		wantErr     func(error) bool
		wantLogs    int
	}{
		{name: "patch allowed", wantPatches: 2},
		{name: "patch refused by RBAC", refuse: fakeclaims.Refusal("patch", true), wantPatches: 1, wantUpdates: 4, wantLogs: 1},
		{name: "update conflicts once", refuse: fakeclaims.Refusal("patch", true), conflicts: 1, wantPatches: 1, wantUpdates: 5, wantLogs: 1},
		{name: "update conflicts every time", refuse: fakeclaims.Refusal("patch", true), conflicts: 100, wantPatches: 1, wantUpdates: 2 * claimUpdateAttempts,
			wantErr: func(err error) bool { return errors.Is(err, ErrClaimKeptChanging) && !apierrors.IsConflict(err) }, wantLogs: 1},
		{name: "patch refused by admission", refuse: fakeclaims.Refusal("patch", false), wantPatches: 2,
			wantErr: apierrors.IsForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(t.Context(), logger)
			cs := fake.NewClientset(kept(makeClaim("data")).PersistentVolumeClaim)
			conflicts := &atomic.Int32{}
			conflicts.Store(tc.conflicts)
			fakeclaims.EnforceResourceVersion(cs, conflicts)
			calls := fakeclaims.WatchWrites(cs, tc.refuse)
			w := NewClaimWriter(cs.CoreV1())
			// The cache's claim is one version behind: the first UPDATE
			// conflicts.
			cached := kept(makeClaim("data")).PersistentVolumeClaim
			cached.ResourceVersion = "6"
			for _, change := range []Change{addRecord(cached.UID), dropRecord(cached.UID)} {
				_, err := w.Write(ctx, cached, change)
				if (tc.wantErr == nil && err != nil) || (tc.wantErr != nil && !tc.wantErr(err)) {
					t.Fatalf("write: %v", err)
				}
			}
			if p, u := calls.Patches.Load(), calls.Updates.Load(); p != tc.wantPatches || u != tc.wantUpdates {
				t.Errorf("%d PATCHes and %d UPDATEs, want %d and %d", p, u, tc.wantPatches, tc.wantUpdates)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if n := strings.Count(logs, switchLog); n != tc.wantLogs {
				t.Errorf("%q logged %d times, want %d:\n%s", switchLog, n, tc.wantLogs, logs)
			}
		})
	}
}

// TestClaimChangeSameByPatchAndUpdate: each change makes the same claim by
// PATCH as by UPDATE, and leaves others' finalizers and annotations.
func TestClaimChangeSameByPatchAndUpdate(t *testing.T) {
	uid := types.UID("uid-data")
	pool, none := nodelabel.PoolValue("d"), ""
	labelled := func(c claimBuilder, v string) claimBuilder {
		c.Labels = map[string]string{nodelabel.Key: v, "example.com/keep": "yes"}
		return c
	}
	tests := []struct {
		name      string
		claim     claimBuilder
		change    Change
		wantLabel *string
	}{
		{name: "add the record", claim: kept(makeClaim("data")), change: addRecord(uid)},
		{name: "add the record again", claim: kept(makeClaim("data").withRecord()), change: addRecord(uid)},
		{name: "remove the record", claim: kept(makeClaim("data").withRecord()), change: dropRecord(uid)},
		{name: "hand back", claim: kept(makeClaim("data").withRecord().withSelectedNode("n1")),
			change: HandBack(uid, false, nil, metav1.UpdateOptions{})},
		{name: "hand back with the record", claim: kept(makeClaim("data").withRecord().withSelectedNode("n1")),
			change: HandBack(uid, true, nil, metav1.UpdateOptions{})},
		{name: "hand back to the pool", claim: labelled(kept(makeClaim("data").withSelectedNode("n1")), "n1"),
			change: HandBack(uid, true, &Label{Key: nodelabel.Key, Value: pool}, metav1.UpdateOptions{}), wantLabel: &pool},
		{name: "hand back to the scheduler, label removed", claim: labelled(kept(makeClaim("data").withSelectedNode("n1")), "n1"),
			change: HandBack(uid, true, &Label{Key: nodelabel.Key}, metav1.UpdateOptions{}), wantLabel: &none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var results [2]*v1.PersistentVolumeClaim
			for i, refuse := range []error{nil, fakeclaims.Refusal("patch", true)} {
				cs := fake.NewClientset(tc.claim.DeepCopy())
				fakeclaims.WatchWrites(cs, refuse)
				got, err := NewClaimWriter(cs.CoreV1()).Write(klog.NewContext(t.Context(), klog.Background()), tc.claim.DeepCopy(), tc.change)
				if err != nil {
					t.Fatal(err)
				}
				results[i] = got
				if tc.wantLabel != nil && (got.Labels[nodelabel.Key] != *tc.wantLabel || got.Labels["example.com/keep"] != "yes") {
					t.Errorf("labels %v, want %s=%q and the others kept", got.Labels, nodelabel.Key, *tc.wantLabel)
				}
				if !slices.Contains(got.Finalizers, "example.com/keep") || got.Annotations["example.com/keep"] != "yes" {
					t.Errorf("others' finalizer or annotation lost: %v %v", got.Finalizers, got.Annotations)
				}
			}
			byPatch, byUpdate := results[0], results[1]
			if !sameSet(byPatch.Finalizers, byUpdate.Finalizers) ||
				fmt.Sprint(byPatch.Annotations) != fmt.Sprint(byUpdate.Annotations) || fmt.Sprint(byPatch.Labels) != fmt.Sprint(byUpdate.Labels) {
				t.Errorf("by PATCH: %v %v; by UPDATE: %v %v", byPatch.Finalizers, byPatch.Annotations, byUpdate.Finalizers, byUpdate.Annotations)
			}
		})
	}
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
