package provisioner

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

// replay hands the pending claims, and only them, to the handlers added
// through the wrapper, and not to those added to the informer directly.
func TestReplayInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bound := makePVC("bound", "c")
	bound.Spec.VolumeName = "pv-bound"
	objs := []runtime.Object{makePVC("pending", "c").PersistentVolumeClaim, makePVC("selected", "c").withSelectedNode("n1").PersistentVolumeClaim,
		bound.PersistentVolumeClaim}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	inf := factory.Core().V1().PersistentVolumeClaims().Informer()
	wrapped := newReplayInformer(inf, pendingClaim)

	var mu sync.Mutex
	var updates, direct []string
	record := func(dst *[]string) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
			mu.Lock()
			defer mu.Unlock()
			*dst = append(*dst, obj.(metaNamed).GetName())
		}}
	}
	if _, err := wrapped.AddEventHandlerWithResyncPeriod(record(&updates), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(record(&direct)); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	if n := wrapped.replay(); n != 2 {
		t.Errorf("replay() = %d, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(updates)
	if diff := cmp.Diff([]string{"pending", "selected"}, updates); diff != "" {
		t.Errorf("replayed claims (-want +got):\n%s", diff)
	}
	if len(direct) != 0 {
		t.Errorf("a handler added to the informer directly got %v", direct)
	}
}

// metaNamed is the part of an API object the test reads.
type metaNamed interface{ GetName() string }

// The PV the library adds to the store after creating it (the object it
// sent, without a resourceVersion) is held aside: it never replaces the
// informer's copy, other readers of the informer never see it, the
// library reads it back until the informer has the PV's event.
func TestLibraryStoreHoldsTheSentPVAside(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().PersistentVolumes().Informer()
	wrapped := newReplayInformer(inf, volumeToDelete)
	if err := wrapped.holdSentAside(); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	lib := wrapped.GetStore()
	sent := func(name string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Name: "c", UID: "u"}}}
	}

	// Sent before the watch brought it: the library alone sees it.
	if err := lib.Add(sent("pv-a")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := inf.GetStore().GetByKey("pv-a"); ok {
		t.Errorf("the informer's store holds the library's copy of pv-a")
	}
	if _, ok, _ := lib.GetByKey("pv-a"); !ok {
		t.Errorf("the library does not read back pv-a")
	}
	if _, ok, _ := lib.Get(sent("pv-a")); !ok {
		t.Errorf("the library does not read back pv-a by object")
	}
	// The watch brings it: the copy held aside goes.
	created := sent("pv-a")
	created.ResourceVersion = "12"
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return wrapped.sent.Len() == 0, nil
	}); err != nil {
		t.Fatalf("the copy of pv-a held aside stays after the watch's event: %v", err)
	}
	if obj, ok, _ := lib.GetByKey("pv-a"); !ok || obj.(*v1.PersistentVolume).ResourceVersion != "12" {
		t.Errorf("the library reads %v, want the informer's copy", obj)
	}

	// The watch was first: the library's copy replaces nothing.
	if err := lib.Add(sent("pv-a")); err != nil {
		t.Fatal(err)
	}
	if obj, _, _ := inf.GetStore().GetByKey("pv-a"); obj.(*v1.PersistentVolume).ResourceVersion != "12" {
		t.Errorf("the library's copy replaced the informer's: %v", obj)
	}
	if n := wrapped.sent.Len(); n != 0 {
		t.Errorf("%d copies held aside, want none", n)
	}

	// A copy from the API (with a resourceVersion) is written through.
	fromAPI := sent("pv-b")
	fromAPI.ResourceVersion = "13"
	if err := lib.Update(fromAPI); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := inf.GetStore().GetByKey("pv-b"); !ok {
		t.Errorf("a copy with a resourceVersion was not written to the store")
	}
}
