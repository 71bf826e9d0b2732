package capacity

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/informercache"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// capacities returns zone -> capacity bytes of the published objects of a class.
func capacities(t *testing.T, ctx context.Context, client *fake.Clientset, class string) map[string]int64 {
	t.Helper()
	list, err := client.StorageV1().CSIStorageCapacities("csi").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, c := range list.Items {
		if c.StorageClassName == class {
			out[c.NodeTopology.MatchLabels[zoneKey]] = c.Capacity.Value()
		}
	}
	return out
}

func TestCapacityPublisher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, csiClient := startMock(t, ctx)
	objs := []runtime.Object{makeClass("wffc").StorageClass, makeClass("imm").Immediate().StorageClass,
		func() *storagev1.StorageClass {
			c := makeClass("other")
			c.Provisioner = "other.example.com"
			return c.StorageClass
		}()}
	for _, n := range []string{"n1", "n2"} {
		objs = append(objs, makeNode(n, map[string]string{"n1": "z1", "n2": "z2"}[n]), makeCSINode(n, zoneKey))
	}
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "csi-controller", UID: "uid-dep"}
	pe := newPublisherEnv(t, Config{Owner: owner}, csiClient, objs...)
	p, client := pe.p, pe.client
	classes := pe.factory.Storage().V1().StorageClasses().Lister()
	capLister := pe.factory.Storage().V1().CSIStorageCapacities().Lister()
	ictx := pe.start(ctx, t)

	if err := p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"z1": 10 * gi, "z2": 10 * gi}, capacities(t, ctx, client, "wffc")); diff != "" {
		t.Errorf("capacities (-want +got):\n%s", diff)
	}
	list, _ := client.StorageV1().CSIStorageCapacities("csi").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Errorf("%d objects, want 2 (one per segment of the one delayed-binding class of the driver)", len(list.Items))
	}
	for _, c := range list.Items {
		if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != "uid-dep" || c.Labels[labelDriverName] != testDriver {
			t.Errorf("object %s: owner %v labels %v", c.Name, c.OwnerReferences, c.Labels)
		}
	}

	// Refresh updates the volume's segment at once and reports the class's
	// objects it refreshed, for the PV annotation.
	if err := mock.SetCapacity(map[string]string{"zone": "z2"}, 3*gi); err != nil {
		t.Fatal(err)
	}
	versions, err := p.Refresh(ctx, zoneTopo("z2"), "wffc")
	if err != nil {
		t.Fatal(err)
	}
	if got := capacities(t, ctx, client, "wffc")["z2"]; got != 3*gi {
		t.Errorf("z2 capacity after Refresh = %d, want %d", got, 3*gi)
	}
	wantKey := "csi/" + capacityName(testDriver, topology.Segment(zoneTopo("z2")[0].GetSegments()).String(), "wffc")
	if _, ok := versions[wantKey]; !ok || len(versions) != 1 {
		t.Errorf("Refresh versions = %v, want the one key %s", versions, wantKey)
	}
	if v, _ := p.Refresh(ctx, zoneTopo("z2"), "imm"); len(v) != 0 {
		t.Errorf("Refresh for a class without objects = %v, want none", v)
	}

	// A touched segment is refreshed by Run without waiting for the poll.
	if err := mock.SetCapacity(map[string]string{"zone": "z1"}, 4*gi); err != nil {
		t.Fatal(err)
	}
	go p.Run(ictx)
	p.Touch(zoneTopo("z1"))
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return capacities(t, ctx, client, "wffc")["z1"] == 4*gi, nil
	}); err != nil {
		t.Errorf("z1 capacity not refreshed after Touch: %v", capacities(t, ctx, client, "wffc"))
	}

	// A class that is gone loses its objects on the next full sync.
	if err := client.StorageV1().StorageClasses().Delete(ctx, "wffc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := classes.Get("wffc"); err == nil {
			return false, nil
		}
		caps, _ := capLister.List(labelsEverything())
		names := make([]string, 0, len(caps))
		for _, c := range caps {
			names = append(names, c.Name)
		}
		sort.Strings(names)
		return len(names) == 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := capacities(t, ctx, client, "wffc"); len(got) != 0 {
		t.Errorf("objects of a deleted class remain: %v", got)
	}
}

func labelsEverything() labels.Selector { return labels.Everything() }

// A segment that appears and a class that is added get their objects at
// once, without waiting for the poll (an hour here).
func TestCapacityPublisherReactsToNewSegmentsAndClasses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	pe := newPublisherEnv(t, Config{}, csiClient, makeClass("wffc").StorageClass, makeNode("n1", "z1"), makeCSINode("n1", zoneKey))
	p, client, factory, index := pe.p, pe.client, pe.factory, pe.index
	index.OnNewSegment(func(s topology.Segment) { p.TouchSegment(s.String()) })
	if _, err := factory.Storage().V1().StorageClasses().Informer().AddEventHandler(classHandler(testDriver, p.TouchAll)); err != nil {
		t.Fatal(err)
	}
	ictx := pe.start(ctx, t)
	go p.Run(ictx)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitFor("initial objects", func() bool { return len(capacities(t, ctx, client, "wffc")) == 1 })
	if _, err := client.CoreV1().Nodes().Create(ctx, makeNode("n2", "z2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StorageV1().CSINodes().Create(ctx, makeCSINode("n2", zoneKey), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("object of the new segment z2", func() bool { return capacities(t, ctx, client, "wffc")["z2"] == 10*gi })
	other := makeClass("other-driver")
	other.Provisioner = "other.example.com"
	if _, err := client.StorageV1().StorageClasses().Create(ctx, other.StorageClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, makeClass("wffc2").StorageClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("objects of the new class", func() bool { return len(capacities(t, ctx, client, "wffc2")) == 2 })
	if got := capacities(t, ctx, client, "other-driver"); len(got) != 0 {
		t.Errorf("objects for another driver's class: %v", got)
	}
}

// publisherEnv is a Publisher of cfg (objects in "csi" and an
// hourly poll unless cfg says otherwise) over a fake clientset with objs
// and a segment index fed by its informers, which start() starts.
type publisherEnv struct {
	p       *Publisher
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	index   *topology.Index
	synced  []cache.InformerSynced
	// watching waits for the watches of classes and capacity objects,
	// which the tests (and Sync) delete.
	watching func()
}

func newPublisherEnv(t *testing.T, cfg Config, csiClient Client, objs ...runtime.Object) publisherEnv {
	t.Helper()
	cfg.DriverName = testDriver
	if cfg.Namespace == "" {
		cfg.Namespace = "csi"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	client := fake.NewClientset(objs...)
	watching := fakewatch.Opened(t, &client.Fake, "storageclasses", "csistoragecapacities")
	factory := informers.NewSharedInformerFactory(client, 0)
	index := topology.NewIndex(testDriver)
	synced, err := informercache.FeedIndex(index, factory.Core().V1().Nodes().Informer(), factory.Storage().V1().CSINodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(cfg, client, csiClient, index,
		factory.Storage().V1().StorageClasses().Lister(), factory.Storage().V1().CSIStorageCapacities().Lister())
	return publisherEnv{p: p, client: client, factory: factory, index: index, synced: synced, watching: watching}
}

// start starts the informers, waits for their caches, the index and the
// watches of classes and capacity objects, and returns a context that ends
// with the test.
func (e publisherEnv) start(ctx context.Context, t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e.factory.Start(ctx.Done())
	e.factory.WaitForCacheSync(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), e.synced...)
	e.watching()
	return ctx
}

// A refresh whose update conflicts (the informer had not seen an earlier
// write of the same object yet, as when provisions of one segment finish
// together) writes over the object as the API has it instead of failing
// until the next poll; concurrent refreshes of one segment all succeed.
func TestCapacityRefreshConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, csiClient := startMock(t, ctx)
	pe := newPublisherEnv(t, Config{}, csiClient, makeClass("wffc").StorageClass, makeNode("n1", "z1"), makeCSINode("n1", zoneKey))
	pe.start(ctx, t)
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		caps, _ := pe.factory.Storage().V1().CSIStorageCapacities().Lister().List(labelsEverything())
		return len(caps) == 1, nil
	}); err != nil {
		t.Fatal("capacity object not in the informer")
	}
	var conflicts atomic.Int32
	pe.client.PrependReactor("update", "csistoragecapacities", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "storage.k8s.io", Resource: "csistoragecapacities"}, "x", errors.New("modified"))
		}
		return false, nil, nil
	})
	if err := mock.SetCapacity(map[string]string{"zone": "z1"}, 3*gi); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			if _, err := pe.p.Refresh(ctx, zoneTopo("z1"), "wffc"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Refresh: %v", err)
	}
	if got := capacities(t, ctx, pe.client, "wffc")["z1"]; got != 3*gi {
		t.Errorf("z1 capacity = %d, want %d", got, 3*gi)
	}
	if conflicts.Load() == 0 {
		t.Error("no update reached the API")
	}
}

// A burst of provisions in one segment (here 20 refreshes at once) costs
// about two GetCapacity calls and writes of the object, not one each: a
// refresh asked for while another ran is answered by the next one, whose
// figure counts its volume.
func TestCapacityRefreshCoalesces(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, csiClient := startMock(t, ctx)
	counting := &countingCapacity{Client: csiClient, delay: 20 * time.Millisecond}
	pe := newPublisherEnv(t, Config{}, counting, makeClass("wffc").StorageClass, makeNode("n1", "z1"), makeCSINode("n1", zoneKey))
	pe.start(ctx, t)
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := mock.SetCapacity(map[string]string{"zone": "z1"}, 3*gi); err != nil {
		t.Fatal(err)
	}
	counting.take()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := pe.p.Refresh(ctx, zoneTopo("z1"), "wffc"); err != nil {
				t.Errorf("Refresh: %v", err)
			}
		})
	}
	wg.Wait()
	if got := len(counting.take()); got > 3 {
		t.Errorf("20 refreshes at once made %d GetCapacity calls, want at most 3", got)
	}
	if got := capacities(t, ctx, pe.client, "wffc")["z1"]; got != 3*gi {
		t.Errorf("z1 capacity = %d, want %d", got, 3*gi)
	}
}

// TestCapacityKeptWhileNoSegmentIsKnown: while the driver is registered on
// no node the publisher sees (kubelet removed its CSINode entry: the driver
// is between two registrations, as in a rolling restart of the node
// DaemonSet), a full sync deletes no object; once a segment is known
// again, its object is the same one, and the objects of segments still
// unknown go.
func TestCapacityKeptWhileNoSegmentIsKnown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	pe := newPublisherEnv(t, Config{}, csiClient, makeClass("wffc").StorageClass,
		makeNode("n1", "z1"), makeCSINode("n1", zoneKey), makeNode("n2", "z2"), makeCSINode("n2", zoneKey))
	var deletes atomic.Int32
	pe.client.PrependReactor("delete", "csistoragecapacities", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes.Add(1)
		return false, nil, nil
	})
	pe.start(ctx, t)
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	before := capacities(t, ctx, pe.client, "wffc")
	if len(before) != 2 {
		t.Fatalf("capacities %v, want z1 and z2", before)
	}
	// kubelet deregisters the driver on both nodes.
	setDriver := func(node string, registered bool) {
		t.Helper()
		c := makeCSINode(node, zoneKey)
		if !registered {
			c.Spec.Drivers = nil
		}
		if _, err := pe.client.StorageV1().CSINodes().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setDriver("n1", false)
	setDriver("n2", false)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(pe.index.KeySets()) == 0, nil
	}); err != nil {
		t.Fatalf("the index still knows key sets %v", pe.index.KeySets())
	}
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := deletes.Load(); n != 0 {
		t.Errorf("%d capacity objects deleted while no segment was known, want 0", n)
	}
	if got := capacities(t, ctx, pe.client, "wffc"); len(got) != 2 {
		t.Errorf("capacities %v while no segment is known, want both kept", got)
	}
	// n1's driver registers again: z1's object is kept, z2's goes.
	setDriver("n1", true)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(pe.index.KeySets()) == 1, nil
	}); err != nil {
		t.Fatal("the index did not learn n1's keys again")
	}
	if err := pe.p.Sync(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := deletes.Load(); n != 1 {
		t.Errorf("%d capacity objects deleted once z1 was known again, want 1 (z2's)", n)
	}
	if got := capacities(t, ctx, pe.client, "wffc"); len(got) != 1 || got["z1"] == 0 {
		t.Errorf("capacities %v, want z1's alone", got)
	}
}
