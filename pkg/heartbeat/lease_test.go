package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// leaseOf is a heartbeat Lease of driver on node, renewed at renewed (zero:
// never) for dur seconds (0: no duration).
func leaseOf(ns, driver, node string, renewed time.Time, dur int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(driver, node), Labels: map[string]string{LeaseDriverLabel: driver}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node)},
	}
	if !renewed.IsZero() {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewed))
	}
	if dur > 0 {
		l.Spec.LeaseDurationSeconds = ptr.To(dur)
	}
	return l
}

func TestLeaseName(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct {
		name, driver, node string
		wantPrefix         string
	}{
		{name: "readable", driver: "mock.csi.example.com", node: "node-1", wantPrefix: "mock.csi.example.com-node-1-"},
		{name: "upper case and underscore", driver: "CSI_Example.com", node: "n1", wantPrefix: "csi-example.com-n1-"},
		{name: "long node name is cut", driver: "d.example.com", node: long, wantPrefix: "d.example.com-nnn"},
		{name: "invalid after sanitizing", driver: "a_.b", node: "n1", wantPrefix: "csi-heartbeat-"},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LeaseName(tc.driver, tc.node)
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("LeaseName(%q, %q) = %q, want prefix %q", tc.driver, tc.node, got, tc.wantPrefix)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("LeaseName(%q, %q) = %q: not a valid name: %v", tc.driver, tc.node, got, errs)
			}
			if again := LeaseName(tc.driver, tc.node); again != got {
				t.Errorf("LeaseName not deterministic: %q, then %q", got, again)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q shared with %s", got, other)
			}
			seen[got] = tc.name
		})
	}
	t.Run("readable parts that coincide get different names", func(t *testing.T) {
		if a, b := LeaseName("a-b", "c"), LeaseName("a", "b-c"); a == b {
			t.Errorf("LeaseName(a-b, c) = LeaseName(a, b-c) = %q", a)
		}
		if a, b := LeaseName("d.example.com", long+"x"), LeaseName("d.example.com", long+"y"); a == b {
			t.Errorf("two long node names cut to the same name %q", a)
		}
	})
}

func TestLeaseLive(t *testing.T) {
	tests := []struct {
		name          string
		lease         *coordinationv1.Lease
		now           time.Time
		wantLive      bool
		wantSilentFor time.Duration
		wantKnown     bool
	}{
		{name: "no lease is unknown, treated as live", wantLive: true},
		{name: "renewed within its duration", lease: leaseOf("ns", testDriver, "n1", t0, 40), now: t0.Add(39 * time.Second),
			wantLive: true, wantSilentFor: 39 * time.Second, wantKnown: true},
		{name: "exactly at expiry still live", lease: leaseOf("ns", testDriver, "n1", t0, 40), now: t0.Add(40 * time.Second),
			wantLive: true, wantSilentFor: 40 * time.Second, wantKnown: true},
		{name: "expired", lease: leaseOf("ns", testDriver, "n1", t0, 40), now: t0.Add(95 * time.Second),
			wantSilentFor: 95 * time.Second, wantKnown: true},
		{name: "renewal ahead of the caller's clock", lease: leaseOf("ns", testDriver, "n1", t0, 40), now: t0.Add(-3 * time.Second),
			wantLive: true, wantKnown: true},
		{name: "acquire time stands in for a missing renew time", now: t0.Add(50 * time.Second), wantSilentFor: 50 * time.Second, wantKnown: true,
			lease: func() *coordinationv1.Lease {
				l := leaseOf("ns", testDriver, "n1", time.Time{}, 40)
				l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0))
				return l
			}()},
		{name: "never renewed is unknown", lease: leaseOf("ns", testDriver, "n1", time.Time{}, 40), now: t0, wantLive: true},
		{name: "no duration is unknown", lease: leaseOf("ns", testDriver, "n1", t0, 0), now: t0.Add(time.Hour), wantLive: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live, silent, known := LeaseLive(tc.lease, tc.now)
			if live != tc.wantLive || silent != tc.wantSilentFor || known != tc.wantKnown {
				t.Errorf("LeaseLive = (%v, %s, %v), want (%v, %s, %v)", live, silent, known, tc.wantLive, tc.wantSilentFor, tc.wantKnown)
			}
		})
	}
}

// add puts objs into s.
func add(t testing.TB, s cache.Store, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
}

// leaseIndexer is a Lease store with the index AddLeaseIndexer adds.
func leaseIndexer(t testing.TB, leases ...*coordinationv1.Lease) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexLeasesByDriverNode: leasesByDriverNode})
	for _, l := range leases {
		add(t, idx, l)
	}
	return idx
}

func TestLivenessLive(t *testing.T) {
	idx := leaseIndexer(t,
		leaseOf("ns", testDriver, "fresh", t0.Add(-5*time.Second), 40),
		leaseOf("ns", testDriver, "dead", t0.Add(-2*time.Minute), 40),
		leaseOf("ns", "other.example.com", "other-driver", t0, 40),
		// A node moved between namespaces: the fresher Lease counts.
		leaseOf("old-ns", testDriver, "moved", t0.Add(-time.Hour), 40),
		leaseOf("ns", testDriver, "moved", t0.Add(-time.Second), 40),
		// No holder: not indexed, so unknown.
		func() *coordinationv1.Lease {
			l := leaseOf("ns", testDriver, "no-holder", t0.Add(-time.Hour), 40)
			l.Spec.HolderIdentity = nil
			return l
		}(),
	)
	lv, err := NewLiveness(idx)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, driver, node string
		wantLive           bool
		wantSilentFor      time.Duration
		wantKnown          bool
	}{
		{name: "fresh", driver: testDriver, node: "fresh", wantLive: true, wantSilentFor: 5 * time.Second, wantKnown: true},
		{name: "expired", driver: testDriver, node: "dead", wantSilentFor: 2 * time.Minute, wantKnown: true},
		{name: "no lease: unknown", driver: testDriver, node: "nowhere", wantLive: true},
		{name: "another driver's lease does not count", driver: testDriver, node: "other-driver", wantLive: true},
		{name: "freshest of two namespaces", driver: testDriver, node: "moved", wantLive: true, wantSilentFor: time.Second, wantKnown: true},
		{name: "lease without holder: unknown", driver: testDriver, node: "no-holder", wantLive: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live, silent, known := lv.Live(tc.driver, tc.node, t0)
			if live != tc.wantLive || silent != tc.wantSilentFor || known != tc.wantKnown {
				t.Errorf("Live(%s, %s) = (%v, %s, %v), want (%v, %s, %v)", tc.driver, tc.node, live, silent, known,
					tc.wantLive, tc.wantSilentFor, tc.wantKnown)
			}
		})
	}
	if _, err := NewLiveness(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})); err == nil {
		t.Error("NewLiveness accepted a store without the index")
	}
}

// The informer wired as documented (LeaseListOptions, AddLeaseIndexer)
// sees heartbeat Leases only, and Liveness follows their renewals.
func TestLivenessFromInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "n1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), LeaseDurationSeconds: ptr.To[int32](40)}}
	ours := leaseOf("csi-topology", testDriver, "n1", t0, 40)
	client := fake.NewClientset(nodeLease, ours)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(LeaseListOptions))
	inf := factory.Coordination().V1().Leases().Informer()
	if err := AddLeaseIndexer(inf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "csi-topology/"+ours.Name {
		t.Errorf("informer holds %v, want only the heartbeat Lease", keys)
	}
	lv, err := NewLiveness(inf.GetIndexer())
	if err != nil {
		t.Fatal(err)
	}
	if live, _, known := lv.Live(testDriver, "n1", t0.Add(time.Minute)); live || !known {
		t.Fatalf("Live a minute after the renewal = %v, %v; want expired", live, known)
	}
	renewed := ours.DeepCopy()
	renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(50 * time.Second)))
	if _, err := client.CoordinationV1().Leases("csi-topology").Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		live, _, _ := lv.Live(testDriver, "n1", t0.Add(time.Minute))
		return live, nil
	}); err != nil {
		t.Errorf("renewal not seen: %v", err)
	}
}

// BenchmarkLive measures one answer of Liveness among the heartbeat Leases
// of 50 and of 5 000 nodes (one in ten expired), cycling over the nodes as a
// scheduler's filter does.
func BenchmarkLive(b *testing.B) {
	for _, n := range []int{50, 5000} {
		b.Run(fmt.Sprintf("%dNodes", n), func(b *testing.B) {
			idx := leaseIndexer(b)
			nodes := make([]string, n)
			for i := range nodes {
				nodes[i] = fmt.Sprintf("node-%d", i)
				renewed := t0
				if i%10 == 0 {
					renewed = t0.Add(-time.Hour)
				}
				add(b, idx, leaseOf("csi-topology", testDriver, nodes[i], renewed, 60))
			}
			lv, err := NewLiveness(idx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				live, _, known := lv.Live(testDriver, nodes[i], t0)
				if !known || live != (i%10 != 0) {
					b.Fatalf("node %s: live %v known %v", nodes[i], live, known)
				}
				i = (i + 1) % len(nodes)
			}
		})
	}
}
