package sourceprotection

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
)

// waitFor polls cond until it holds (generous: tests run under load).
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func TestCloneProtection(t *testing.T) {
	src := boundSource()
	src.Finalizers = []string{"kubernetes.io/pvc-protection", FinalizerCloneSource} // left by an earlier process
	pending := makePVC("clone-a").cloneOf("src").PersistentVolumeClaim
	bound := makePVC("clone-b").cloneOf("src").PersistentVolumeClaim
	bound.Spec.VolumeName = "pv-b"
	unrelated := makePVC("other").PersistentVolumeClaim
	e := newEnv(t, []runtime.Object{src, pending, bound, unrelated}, nil)
	key := Key{Kind: kindClaim, Namespace: "apps", Name: "src"}
	finalizers := func() []string {
		c, err := e.client.CoreV1().PersistentVolumeClaims("apps").Get(e.ctx, "src", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Finalizers
	}

	if err := e.protection.sync(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(finalizers(), FinalizerCloneSource) {
		t.Fatal("finalizer removed while clone-a is in flight")
	}

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { e.protection.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// clone-a gets its volume: no clone is in flight any more.
	pending.Spec.VolumeName = "pv-a"
	if _, err := e.client.CoreV1().PersistentVolumeClaims("apps").Update(e.ctx, pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.ctx, "the cloning-protection finalizer to go", func() bool { return !slices.Contains(finalizers(), FinalizerCloneSource) })
	if got := finalizers(); len(got) != 1 || got[0] != "kubernetes.io/pvc-protection" {
		t.Errorf("finalizers = %v, want only kubernetes.io/pvc-protection", got)
	}

	// A new clone is provisioned: Protect adds the finalizer again, even
	// if the informer has not seen the removal yet.
	// The running controller may remove it again at once: record the
	// write itself rather than read it back.
	var added atomic.Bool
	e.client.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if c, ok := a.(k8stesting.UpdateAction).GetObject().(*v1.PersistentVolumeClaim); ok && c.Name == "src" && slices.Contains(c.Finalizers, FinalizerCloneSource) {
			added.Store(true)
		}
		return false, nil, nil
	})
	if err := e.protection.Protect(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	if !added.Load() {
		t.Fatal("Protect did not add the finalizer back")
	}
	// No clone of src is pending (none was created for this Protect): the
	// update event queues src and the controller removes it again.
	waitFor(t, e.ctx, "the finalizer to go again", func() bool { return !slices.Contains(finalizers(), FinalizerCloneSource) })
}

func TestSnapshotProtection(t *testing.T) {
	restore := makePVC("r").restoreOf("snap").PersistentVolumeClaim
	e := newEnv(t, []runtime.Object{restore}, []runtime.Object{readySnapshot()})
	key := Key{Kind: kindSnapshot, Namespace: "apps", Name: "snap"}
	finalizers := func() []string {
		s, err := e.snap.SnapshotV1().VolumeSnapshots("apps").Get(e.ctx, "snap", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Finalizers
	}
	if err := e.protection.Protect(e.ctx, key); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(finalizers(), FinalizerSnapshotSource) {
		t.Fatal("Protect did not add the snapshot finalizer")
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { e.protection.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// While the restore is pending the finalizer stays; once it is bound
	// it goes.
	waitFor(t, e.ctx, "the informer to see the finalizer", func() bool {
		s, err := e.snapshots.VolumeSnapshots("apps").Get("snap")
		return err == nil && slices.Contains(s.Finalizers, FinalizerSnapshotSource)
	})
	if err := e.protection.sync(e.ctx, key); err != nil || !slices.Contains(finalizers(), FinalizerSnapshotSource) {
		t.Fatalf("sync with the restore pending: %v, finalizers %v", err, finalizers())
	}
	restore.Spec.VolumeName = "pv-r"
	restore.Status.Phase = v1.ClaimBound
	if _, err := e.client.CoreV1().PersistentVolumeClaims("apps").Update(e.ctx, restore, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.ctx, "the snapshot finalizer to go", func() bool { return !slices.Contains(finalizers(), FinalizerSnapshotSource) })
}
