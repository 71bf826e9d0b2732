package provisioner

import (
	"context"
	"slices"
	"sync"
	"testing"

	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/bindthrough"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// TestLeaderWork: the leader's work is the documented list, in its order,
// of the parts the configuration has.
func TestLeaderWork(t *testing.T) {
	sources := &sourceWiring{protection: &sourceprotection.Controller{}}
	lib := &controller.ProvisionController{}
	tests := []struct {
		name string
		c    *Controller
		want []string
	}{
		{name: "central provisioner, record off", c: &Controller{sources: sources, lib: lib},
			want: []string{"source protection", "provisioning"}},
		{name: "every part", c: &Controller{sources: sources, lib: lib, recordKeeper: &inflight.Keeper{},
			capacity: &capacity.Publisher{}, claimer: &nodedeploy.Claimer{}, binder: &bindthrough.Binder{}},
			want: []string{"in-flight record keeper", "capacity publishing", "source protection", "node claimer", "bind-through", "provisioning"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range tc.c.leaderWork() {
				got = append(got, r.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("runners %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunRunners: a runner's prepare ends before any later runner starts;
// the last runner runs in the caller, which returns when it does, while the
// others go on until the context ends.
func TestRunRunners(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		events []string
		bg     sync.WaitGroup
	)
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	started := make(chan string, 2)
	background := func(name string) func(context.Context) {
		bg.Add(1)
		return func(ctx context.Context) {
			defer bg.Done()
			started <- name
			<-ctx.Done()
			note(name + " ended")
		}
	}
	runRunners(ctx, []runner{
		{name: "a", prepare: func(context.Context) { note("a prepared") }, run: background("a")},
		{name: "b", prepare: func(context.Context) { note("b prepared") }, run: background("b")},
		{name: "last", run: func(context.Context) { note("last ran") }},
	})
	mu.Lock()
	if want := []string{"a prepared", "b prepared", "last ran"}; !slices.Equal(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	mu.Unlock()
	for range 2 {
		<-started
	}
	cancel()
	bg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if got := events[3:]; len(got) != 2 || !slices.Contains(got, "a ended") || !slices.Contains(got, "b ended") {
		t.Errorf("after the context ended: %q, want a and b ended", got)
	}
}
