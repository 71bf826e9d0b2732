package scheduler

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
)

// heartbeatLease is the Lease csi-node-publisher keeps for drv on node,
// last renewed at renewed, with a TTL of ttl.
func heartbeatLease(drv, node string, renewed time.Time, ttl time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: heartbeat.LeaseName(drv, node), Labels: map[string]string{heartbeat.LeaseDriverLabel: drv}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(ttl / time.Second)),
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// testLiveness returns the Liveness of HeartbeatInformer over a fake
// clientset holding leases, synced.
func testLiveness(t testing.TB, namespace string, leases ...*coordinationv1.Lease) LivenessSource {
	t.Helper()
	client := fake.NewClientset()
	for _, l := range leases {
		if _, err := client.CoordinationV1().Leases(l.Namespace).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory, _, lv, err := HeartbeatInformer(client, namespace)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v not synced", typ)
		}
	}
	return lv
}

// A node whose driver's heartbeat expired is rejected, with the driver and
// the silence in the message, for pods with pending delayed-binding claims
// only; live and unknown nodes (no Lease, or only another driver's) pass.
func TestFilterDriverHeartbeat(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w := newWorld(t)
	withCounterIndexes(t, w)
	w.add(t, w.classes, class("fast"))
	for _, n := range []string{"live", "silent", "unknown", "other-driver", "elsewhere"} {
		w.add(t, w.nodes, node(n, "z1"))
		w.add(t, w.csiNodes, csiNode(n, nil, driver))
	}
	w.add(t, w.claims, claim("a", "fast", gi), boundClaim("bound", "pv-1"))
	w.add(t, w.volumes, csiVolume("pv-1", "h1"))
	clock := func() time.Time { return now }
	c := w.coreFrom(t, Config{Driver: driver}, clock, OptionalSources{Liveness: testLiveness(t, "",
		heartbeatLease(driver, "live", now.Add(-2*time.Second), 4*time.Second),
		heartbeatLease(driver, "silent", now.Add(-72*time.Second), 4*time.Second),
		heartbeatLease("other.example.com", "other-driver", now.Add(-time.Hour), 4*time.Second),
	)})

	tests := []struct {
		name    string
		pod     *v1.Pod
		node    string
		wantMsg string
	}{
		{name: "pending claim, live driver", pod: pod("p", "a"), node: "live"},
		{name: "pending claim, silent driver", pod: pod("p", "a"), node: "silent",
			wantMsg: "CSIDriverNotLive: CSI driver mock.csi.example.com on node silent has not renewed its heartbeat for 1m12s"},
		{name: "pending claim, no heartbeat Lease", pod: pod("p", "a"), node: "unknown"},
		{name: "pending claim, only another driver's Lease", pod: pod("p", "a"), node: "other-driver"},
		{name: "bound volume only, silent driver", pod: pod("p", "bound"), node: "silent"},
		{name: "no volumes of ours, silent driver", pod: pod("p"), node: "silent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			podVols, err := c.PodVolumes(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			st := c.Filter(podVols, node(tc.node, "z1"))
			switch {
			case tc.wantMsg == "" && st != nil:
				t.Errorf("Filter = %v, want fit", st)
			case tc.wantMsg != "" && (st == nil || st.String() != tc.wantMsg || !st.Unresolvable || st.Reason != ReasonDriverNotLive):
				t.Errorf("Filter = %+v, want unresolvable %q", st, tc.wantMsg)
			}
		})
	}

	t.Run("off without a LivenessSource", func(t *testing.T) {
		c := w.core(t, clock)
		podVols, err := c.PodVolumes(pod("p", "a"))
		if err != nil {
			t.Fatal(err)
		}
		if st := c.Filter(podVols, node("silent", "z1")); st != nil {
			t.Errorf("Filter = %v, want fit", st)
		}
	})
}

// HeartbeatInformer with a namespace sees only the Leases there.
func TestHeartbeatInformerNamespace(t *testing.T) {
	now := time.Now()
	lease := heartbeatLease(driver, "n1", now.Add(-time.Minute), 4*time.Second)
	other := heartbeatLease(driver, "n2", now.Add(-time.Minute), 4*time.Second)
	other.Namespace = "elsewhere"
	lv := testLiveness(t, "csi", lease, other)
	if live, _, known := lv.Live(driver, "n1", now); live || !known {
		t.Errorf("n1: live %v known %v, want expired", live, known)
	}
	if live, _, known := lv.Live(driver, "n2", now); !live || known {
		t.Errorf("n2 (Lease in another namespace): live %v known %v, want unknown", live, known)
	}
}
