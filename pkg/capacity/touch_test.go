package capacity

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// countingCapacity records the zone and parameters of every GetCapacity
// call; each call takes delay more (as a real driver's takes a while).
type countingCapacity struct {
	Client
	delay  time.Duration
	mu     sync.Mutex
	zones  []string
	params []map[string]string
}

func (c *countingCapacity) GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, opts ...grpc.CallOption) (*csi.GetCapacityResponse, error) {
	c.mu.Lock()
	c.zones = append(c.zones, in.GetAccessibleTopology().GetSegments()[zoneKey])
	c.params = append(c.params, in.GetParameters())
	c.mu.Unlock()
	time.Sleep(c.delay)
	return c.Client.GetCapacity(ctx, in, opts...)
}

func (c *countingCapacity) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.zones
	c.zones = nil
	return out
}

// TestCapacityTouchRefreshesOnlyTouched: Run refreshes a touched segment
// alone (no full sync of every segment and class after it), and touches
// pile up without loss however many come before Run gets to them.
func TestCapacityTouchRefreshesOnlyTouched(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, csiClient := startMock(t, ctx)
	counting := &countingCapacity{Client: csiClient}
	class := makeClass("wffc").WithParams("tier", "gold", "csi.storage.k8s.io/fstype", "xfs").StorageClass
	pe := newPublisherEnv(t, Config{}, counting, class,
		makeNode("n1", "z1"), makeCSINode("n1", zoneKey), makeNode("n2", "z2"), makeCSINode("n2", zoneKey))
	p, client := pe.p, pe.client
	ictx := pe.start(ctx, t)

	// Before Run: 200 distinct touches are all kept, once each.
	for i := 0; i < 200; i++ {
		p.TouchSegment(fmt.Sprintf("seg-%03d", i))
		p.TouchSegment(fmt.Sprintf("seg-%03d", i))
	}
	if got := len(p.takePending()); got != 200 {
		t.Errorf("pending segments = %d, want 200", got)
	}

	go p.Run(ictx)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return len(capacities(t, ctx, client, "wffc")) == 2, nil
	}); err != nil {
		t.Fatalf("first full sync: %v", capacities(t, ctx, client, "wffc"))
	}
	// GetCapacity gets the class's parameters for the driver (the reserved
	// csi.storage.k8s.io/ keys stripped), as CreateVolume would.
	counting.mu.Lock()
	for _, p := range counting.params {
		if diff := cmp.Diff(map[string]string{"tier": "gold"}, p); diff != "" {
			t.Errorf("GetCapacity parameters (-want +got):\n%s", diff)
		}
	}
	counting.params = nil
	counting.mu.Unlock()
	_ = counting.take()
	if err := mock.SetCapacity(map[string]string{"zone": "z1"}, 4*gi); err != nil {
		t.Fatal(err)
	}
	p.Touch(zoneTopo("z1"))
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return capacities(t, ctx, client, "wffc")["z1"] == 4*gi, nil
	}); err != nil {
		t.Fatalf("z1 not refreshed after Touch: %v", capacities(t, ctx, client, "wffc"))
	}
	// Give a wrongly following full sync the time to show up.
	p.TouchSegment(topology.Segment(zoneTopo("z1")[0].GetSegments()).String())
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		counting.mu.Lock()
		defer counting.mu.Unlock()
		return len(counting.zones) >= 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"z1", "z1"}, counting.take()); diff != "" {
		t.Errorf("GetCapacity calls after two touches of z1 (-want +got):\n%s", diff)
	}
}

// gatedCapacity holds every GetCapacity call until the test releases it,
// and tells the test which class (its "class" parameter) each call is for.
type gatedCapacity struct {
	Client
	calls   chan string
	release chan struct{}
}

func (g *gatedCapacity) GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, opts ...grpc.CallOption) (*csi.GetCapacityResponse, error) {
	g.calls <- in.GetParameters()["class"]
	<-g.release
	return g.Client.GetCapacity(ctx, in, opts...)
}

// A refresh asked for while another wrote the segment's first object is
// answered, for its second object, by a write another refresh began after
// it was asked for: it does not wait its turn there to write again. Two
// refreshes of a segment with two classes: the first one's writes of both
// objects and the second's of the first object (whose GetCapacity came
// before it was asked) make three GetCapacity calls, not four.
func TestCapacityRefreshSharesLaterObjects(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	gated := &gatedCapacity{Client: csiClient, calls: make(chan string), release: make(chan struct{})}
	pe := newPublisherEnv(t, Config{}, gated, makeClass("a").WithParams("class", "a").StorageClass,
		makeClass("b").WithParams("class", "b").StorageClass, makeNode("n1", "z1"), makeCSINode("n1", zoneKey))
	pe.start(ctx, t)
	next := func() string {
		t.Helper()
		select {
		case c := <-gated.calls:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no GetCapacity call")
			return ""
		}
	}
	var wg sync.WaitGroup
	refresh := func() {
		wg.Go(func() {
			if _, err := pe.p.Refresh(ctx, zoneTopo("z1"), "a"); err != nil {
				t.Errorf("Refresh: %v", err)
			}
		})
	}
	refresh()
	if got := next(); got != "a" {
		t.Fatalf("the first refresh's first GetCapacity is for class %q, want a", got)
	}
	// The second refresh is asked for while the first one's GetCapacity of
	// a runs (before it, the first had the last ask number).
	asked := pe.p.asks.Load()
	refresh()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return pe.p.asks.Load() > asked, nil
	}); err != nil {
		t.Fatal("the second refresh did not start")
	}
	gated.release <- struct{}{}
	// Now the first refreshes b while the second refreshes a.
	got := []string{next(), next()}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	gated.release <- struct{}{}
	gated.release <- struct{}{}
	for {
		select {
		case c := <-gated.calls:
			got = append(got, c)
			gated.release <- struct{}{}
			continue
		case <-done:
		}
		break
	}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"a", "b"}, got); diff != "" {
		t.Errorf("GetCapacity calls after the first one (-want +got):\n%s", diff)
	}
}
