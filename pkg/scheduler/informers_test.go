package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
)

// informerEnv is a Core on a real informer factory over a fake clientset.
type informerEnv struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	core    *Core
	probes  int
}

// startInformers builds the Core with NewFromInformers over objs, node n0
// (zone z0) and the class "fast" unless noClass, starts the factory and
// waits for its caches, for the watches of the kinds the tests delete, and
// for the claim handler (sync).
func startInformers(ctx context.Context, t *testing.T, noClass bool, objs ...runtime.Object) *informerEnv {
	t.Helper()
	if !noClass {
		objs = append(objs, class("fast"))
	}
	objs = append(objs, node("n0", "z0"), csiNode("n0", nil, driver),
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-probe"}})
	client := fake.NewClientset(objs...)
	watching := fakewatch.Opened(t, &client.Fake, "persistentvolumeclaims", "pods", "csinodes")
	factory := informers.NewSharedInformerFactory(client, 0)
	core, err := NewFromInformers(Config{Driver: driver}, factory, OptionalSources{})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	watching()
	env := &informerEnv{client: client, factory: factory, core: core}
	env.sync(ctx, t)
	return env
}

// sync waits until the claim handler has processed every claim event so
// far: claim events are handled in order, and a probe claim created now,
// reserved in zone z0 and bound to a PV without capacity versions, ends its
// reservation when its event is handled.
func (e *informerEnv) sync(ctx context.Context, t *testing.T) {
	t.Helper()
	e.probes++
	probe := boundClaim(fmt.Sprintf("probe-%d", e.probes), "pv-probe")
	e.core.Ledger().Reserve(Request{UID: probe.UID, Claim: "ns/" + probe.Name, Pod: "ns/probe", Node: "n0",
		Segment: topologySegment("z0"), Class: "fast", Bytes: gi})
	if _, err := e.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReserved(ctx, t, "z0", 0)
}

// waitReserved waits until the zone's bucket holds want bytes.
func (e *informerEnv) waitReserved(ctx context.Context, t *testing.T, zone string, want int64) {
	t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = e.core.Ledger().Reserved(topologySegment(zone), "fast", nil)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("zone %s reserves %d bytes, want %d: %v", zone, got, want, err)
	}
}

// informerCase is one case of the NewFromInformers tests.
type informerCase struct {
	name string
	objs []runtime.Object
	// reserve reserves pod "p" (claims a and b) on n1 after start-up.
	reserve bool
	// noClass starts without the class "fast".
	noClass bool
	// before is what zone z1 reserves before act.
	before int64
	act    func(ctx context.Context, c kubernetes.Interface) error
	// after is what zone z1 reserves once act's events are handled.
	after int64
}

// TestNewFromInformersReleases checks that claim and pod events end
// reservations, and only those they should.
func TestNewFromInformersReleases(t *testing.T) {
	a, b := claim("a", "fast", gi), selectedClaim("b", "n1")
	b.Spec.Resources.Requests[v1.ResourceStorage] = *resource.NewQuantity(2*gi, resource.BinarySI)
	runInformerCases(t, []informerCase{
		{
			name:   "claim deleted",
			objs:   []runtime.Object{node("n1", "z1"), csiNode("n1", nil, driver), selectedClaim("s", "n1")},
			before: gi, after: 0,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				return c.CoreV1().PersistentVolumeClaims("ns").Delete(ctx, "s", metav1.DeleteOptions{})
			},
		},
		{
			name:   "selected-node annotation removed",
			objs:   []runtime.Object{node("n1", "z1"), csiNode("n1", nil, driver), selectedClaim("s", "n1")},
			before: gi, after: 0,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.CoreV1().PersistentVolumeClaims("ns").Update(ctx, claim("s", "fast", gi), metav1.UpdateOptions{})
				return err
			},
		},
		{
			name:    "pod deleted: its unannotated claim is released, its annotated one stays",
			objs:    []runtime.Object{node("n1", "z1"), csiNode("n1", nil, driver), a, b, pod("p", "a", "b")},
			reserve: true, before: 3 * gi, after: 2 * gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				return c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{})
			},
		},
		{
			name:    "an unrelated update of a reserved claim keeps its reservation",
			objs:    []runtime.Object{node("n1", "z1"), csiNode("n1", nil, driver), a, b, pod("p", "a", "b")},
			reserve: true, before: 3 * gi, after: 3 * gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				labelled := claim("a", "fast", gi)
				labelled.Labels = map[string]string{"app": "x"}
				_, err := c.CoreV1().PersistentVolumeClaims("ns").Update(ctx, labelled, metav1.UpdateOptions{})
				return err
			},
		},
	})
}

// TestNewFromInformersStartupOrder checks that a claim seen before its
// node, CSINode, class or topology label is reserved once they arrive.
func TestNewFromInformersStartupOrder(t *testing.T) {
	runInformerCases(t, []informerCase{
		{
			name:   "selected node added after its claim",
			objs:   []runtime.Object{csiNode("n1", nil, driver), selectedClaim("s", "n1")},
			before: 0, after: gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.CoreV1().Nodes().Create(ctx, node("n1", "z1"), metav1.CreateOptions{})
				return err
			},
		},
		{
			name:   "selected node's CSINode added after its claim",
			objs:   []runtime.Object{node("n1", "z1"), selectedClaim("s", "n1")},
			before: 0, after: gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.StorageV1().CSINodes().Create(ctx, csiNode("n1", nil, driver), metav1.CreateOptions{})
				return err
			},
		},
		{
			name:   "driver registered on the selected node's CSINode later",
			objs:   []runtime.Object{node("n1", "z1"), csiNode("n1", nil, "other.example.com"), selectedClaim("s", "n1")},
			before: 0, after: gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.StorageV1().CSINodes().Update(ctx, csiNode("n1", nil, driver), metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "class added after its claim", noClass: true,
			objs:   []runtime.Object{node("n1", "z1"), csiNode("n1", nil, driver), selectedClaim("s", "n1")},
			before: 0, after: gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.StorageV1().StorageClasses().Create(ctx, class("fast"), metav1.CreateOptions{})
				return err
			},
		},
		{
			name:   "selected node gets its topology label later",
			objs:   []runtime.Object{node("n1", ""), csiNode("n1", nil, driver), selectedClaim("s", "n1")},
			before: 0, after: gi,
			act: func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.CoreV1().Nodes().Update(ctx, node("n1", "z1"), metav1.UpdateOptions{})
				return err
			},
		},
	})
}

func runInformerCases(t *testing.T, tests []informerCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			env := startInformers(ctx, t, tc.noClass, tc.objs...)
			if tc.reserve {
				podVols, err := env.core.PodVolumes(pod("p", "a", "b"))
				if err != nil {
					t.Fatal(err)
				}
				env.core.Reserve(podVols, node("n1", "z1"))
			}
			env.waitReserved(ctx, t, "z1", tc.before)
			if err := tc.act(ctx, env.client); err != nil {
				t.Fatal(err)
			}
			env.sync(ctx, t)
			env.waitReserved(ctx, t, "z1", tc.after)
		})
	}
}

// Deletions seen only as tombstones (cache.DeletedFinalStateUnknown) end
// reservations as well.
func TestDeletionTombstones(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env := startInformers(ctx, t, false, node("n1", "z1"), csiNode("n1", nil, driver),
		claim("a", "fast", gi), claim("c", "fast", gi), pod("p", "a"), pod("q", "c"))
	claims := env.factory.Core().V1().PersistentVolumeClaims()
	h := handlers{core: env.core, nodes: env.factory.Core().V1().Nodes().Lister(),
		claims: claims.Lister(), selected: claims.Informer().GetIndexer()}
	for _, name := range []string{"p", "q"} {
		podVols, err := env.core.PodVolumes(pod(name, map[string]string{"p": "a", "q": "c"}[name]))
		if err != nil {
			t.Fatal(err)
		}
		env.core.Reserve(podVols, node("n1", "z1"))
	}
	h.podDeleted(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod("p", "a")})
	if got := env.core.Ledger().Reserved(topologySegment("z1"), "fast", nil); got != gi {
		t.Errorf("after the pod's tombstone: %d bytes reserved, want %d", got, gi)
	}
	h.claimDeleted(cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: claim("c", "fast", gi)})
	if got := env.core.Ledger().Len(); got != 0 {
		t.Errorf("after the claim's tombstone: %d reservations, want 0", got)
	}
}

// TestNewFromInformersCSINodeEvents: a Core from NewFromInformers trusts
// its cached segments between CSINode events, so each event (update,
// delete, add) must reach Filter's next answer.
func TestNewFromInformersCSINodeEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env := startInformers(ctx, t, false, claim("a", "fast", gi))
	n0, err := env.factory.Core().V1().Nodes().Lister().Get("n0")
	if err != nil {
		t.Fatal(err)
	}
	podVols, err := env.core.PodVolumes(pod("p", "a"))
	if err != nil {
		t.Fatal(err)
	}
	csiNodes := env.client.StorageV1().CSINodes()
	waitFilter := func(what string, want Reason) {
		t.Helper()
		var st *Status
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			st = env.core.Filter(podVols, n0)
			return (st == nil && want == "") || (st != nil && st.Reason == want), nil
		})
		if err != nil {
			t.Fatalf("%s: Filter says %v, want %q", what, st, want)
		}
	}
	waitFilter("registered", "")
	if _, err := csiNodes.Update(ctx, csiNode("n0", nil, "other.example.com"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFilter("driver gone from the CSINode", ReasonDriverNotRegistered)
	if _, err := csiNodes.Update(ctx, csiNode("n0", nil, driver), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFilter("registered again", "")
	if err := csiNodes.Delete(ctx, "n0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFilter("CSINode deleted", ReasonDriverNotRegistered)
	if _, err := csiNodes.Create(ctx, csiNode("n0", nil, driver), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFilter("CSINode created", "")
}
