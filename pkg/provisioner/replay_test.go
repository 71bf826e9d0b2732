package provisioner

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
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
