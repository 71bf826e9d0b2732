package e2eplugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

const timeout = lab.WorkloadTimeout

// setup creates a namespace and a WaitForFirstConsumer class for one test.
func setup(t *testing.T) (context.Context, string, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ns := strings.ToLower("p-" + t.Name())
	env.NamespaceWithClass(t, ctx, ns)
	return ctx, ns, ns
}

func claimAndPod(t *testing.T, ctx context.Context, ns, class, name string, size int64, preferNode string) {
	t.Helper()
	env.ClaimAndPod(t, ctx, ns, class, name, size, preferNode)
}

func waitPlaced(t *testing.T, ctx context.Context, ns, name string) (string, string) {
	t.Helper()
	return env.WaitPlaced(t, ctx, ns, name)
}

// Issue 5, scenario 1 (ours): a node without the driver is filtered, so a
// pod that prefers it runs elsewhere. (The stock scheduler sends such a pod
// there and it stays Pending: test/e2e TestSelectedNodeGone.)
func TestNodeWithoutDriverFiltered(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-bare", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		claimAndPod(t, ctx, ns, class, fmt.Sprintf("app-%d", i), gi, "node-bare")
	}
	for i := 0; i < 3; i++ {
		node, zone := waitPlaced(t, ctx, ns, fmt.Sprintf("app-%d", i))
		if node == "node-bare" || zone != env.Nodes[node] {
			t.Errorf("app-%d on %s (zone %s), volume in %s", i, node, env.Nodes[node], zone)
		}
	}
}

// Issue 5, scenario 3 (ours): a claim still being provisioned for a node
// counts against the node's attach limit, so a second pod does not go there.
func TestPendingClaimCountsAgainstLimit(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-one", Zone: "z3", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(4 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	claimAndPod(t, ctx, ns, class, "first", gi, "node-one")
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "first", metav1.GetOptions{})
		return err == nil && pvc.Annotations["volume.kubernetes.io/selected-node"] == "node-one", nil
	}); err != nil {
		t.Fatalf("first claim not selected for node-one: %v", err)
	}
	claimAndPod(t, ctx, ns, class, "second", gi, "node-one")
	if node, _ := waitPlaced(t, ctx, ns, "first"); node != "node-one" {
		t.Errorf("first on %s, want node-one", node)
	}
	if node, _ := waitPlaced(t, ctx, ns, "second"); node == "node-one" {
		t.Error("second pod placed on node-one although its only attach slot is taken by a pending claim")
	}
}

// Issue 5, scenario 5 (ours): the selected node is deleted between Filter
// and provisioning: the claim is rescheduled and provisioned elsewhere.
func TestNodeDeletedBeforeProvisioning(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-doomed", Zone: "z1", Driver: true}); err != nil {
		t.Fatal(err)
	}
	env.StopProvisioner()
	t.Cleanup(func() {
		if env.Provisioner() == nil {
			_ = env.StartProvisioner()
		}
	})
	claimAndPod(t, ctx, ns, class, "first", gi, "node-doomed")
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "first", metav1.GetOptions{})
		return err == nil && pvc.Annotations["volume.kubernetes.io/selected-node"] == "node-doomed", nil
	}); err != nil {
		t.Fatalf("claim not selected for node-doomed: %v", err)
	}
	env.StopPublisher("node-doomed")
	if err := client.CoreV1().Nodes().Delete(ctx, "node-doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(env.Nodes, "node-doomed")
	if err := env.StartProvisioner(); err != nil {
		t.Fatal(err)
	}
	node, zone := waitPlaced(t, ctx, ns, "first")
	if node == "node-doomed" || zone != env.Nodes[node] {
		t.Errorf("first on %s (zone %s), volume in %s", node, env.Nodes[node], zone)
	}
}

// Issue 5, scenario 2 (ours), the counterpart of test/e2e
// TestStockBurstOvercommits: 12 pods of 10 Gi that prefer zone z1 (60 Gi
// free) -- the reservations of pods in flight keep all but 6 out of z1, so no
// claim ever comes back to the scheduler.
func TestPreferredZoneNotOvercommitted(t *testing.T) {
	ctx, ns, class := setup(t)
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.Topology[lab.ZoneKey] == "z1" {
			if err := env.SetSegmentCapacity(ctx, s.Topology, s.UsedBytes+60*gi); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.StorageV1().CSIStorageCapacities("csi-topology").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range list.Items {
			if c.StorageClassName == class && c.NodeTopology.MatchLabels[lab.ZoneKey] == "z1" && c.Capacity != nil && c.Capacity.Value() == 60*gi {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("capacity of z1 not published: %v", err)
	}
	const n = 12
	for i := 0; i < n; i++ {
		env.ClaimAndPodPreferring(t, ctx, ns, class, fmt.Sprintf("pref-%02d", i), 10*gi, lab.ZoneKey, "z1")
	}
	inZ1 := 0
	for i := 0; i < n; i++ {
		node, zone := waitPlaced(t, ctx, ns, fmt.Sprintf("pref-%02d", i))
		if zone != env.Nodes[node] {
			t.Errorf("pref-%02d on %s in %s, volume in %s", i, node, env.Nodes[node], zone)
		}
		if zone == "z1" {
			inZ1++
		}
	}
	if inZ1 > 6 {
		t.Errorf("%d volumes of 10 Gi in z1, which had 60 Gi free", inZ1)
	}
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason == "ProvisioningFailed" {
			t.Errorf("claim %s came back: %s", e.InvolvedObject.Name, e.Message)
		}
	}
	t.Logf("%d of %d pods in z1, no claim sent back", inZ1, n)
}

// Issue 5, scenario 2 (ours), last because it fills the zones: a burst of 20 pods x 10 Gi against zones of
// 60, 60 and 100 Gi: every pod is placed where there was room, the driver
// never answers RESOURCE_EXHAUSTED, and no zone is over capacity.
func TestBurstRespectsCapacity(t *testing.T) {
	ctx, ns, class := setup(t)
	// Earlier tests used some space: give each zone exactly 60, 60 and 100
	// Gi free, and wait until the published capacity says so.
	free := map[string]int64{"z1": 60 * gi, "z2": 60 * gi, "z3": 100 * gi}
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := env.SetSegmentCapacity(ctx, s.Topology, s.UsedBytes+free[s.Topology[lab.ZoneKey]]); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.StorageV1().CSIStorageCapacities("csi-topology").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ok := 0
		for _, c := range list.Items {
			if c.StorageClassName == class && c.Capacity != nil && c.Capacity.Value() == free[c.NodeTopology.MatchLabels[lab.ZoneKey]] {
				ok++
			}
		}
		return ok == 3, nil
	}); err != nil {
		t.Fatalf("capacity objects do not show 60/60/100 Gi free: %v", err)
	}
	before, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 0; i < n; i++ {
		claimAndPod(t, ctx, ns, class, fmt.Sprintf("burst-%02d", i), 10*gi, "")
	}
	perZone := map[string]int{}
	for i := 0; i < n; i++ {
		node, zone := waitPlaced(t, ctx, ns, fmt.Sprintf("burst-%02d", i))
		if zone != env.Nodes[node] {
			t.Errorf("burst-%02d on %s in %s, volume in %s", i, node, env.Nodes[node], zone)
		}
		perZone[zone]++
	}
	limits := map[string]int{"z1": 6, "z2": 6, "z3": 10}
	for z, c := range perZone {
		if c > limits[z] {
			t.Errorf("zone %s holds %d volumes of 10 Gi, capacity %d", z, c, limits[z])
		}
	}
	reqs, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exhausted := 0
	for _, r := range reqs[len(before):] {
		if strings.Contains(r.Result, "ResourceExhausted") {
			exhausted++
		}
	}
	if exhausted != 0 {
		t.Errorf("%d CreateVolume calls answered RESOURCE_EXHAUSTED, want 0", exhausted)
	}
	t.Logf("volumes per zone: %v; CreateVolume calls: %d", perZone, len(reqs)-len(before))
}

// Issue 5, scenario 3 across a scheduler restart (ours): the first pod's
// claim, selected for a one-slot node in a scheduling cycle that ended with
// the restart (and its pod deleted and created again meanwhile), still
// counts against the node's limit, so the second pod is refused and the
// first pod runs there. (Stock: test/e2e
// TestStockForgetsPendingClaimAcrossRestart.)
func TestPendingClaimCountsAcrossRestart(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-slot", Zone: "z2", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	env.EnsureRoom(t, ctx, "z2", 4*gi) // the burst tests fill the zones
	out := env.PendingClaimAcrossRestart(t, ctx, ns, class, "node-slot")
	if out.SecondSelected {
		t.Fatal("second pod's claim sent to node-slot although the first pod's pending claim holds its only attach slot")
	}
	if !strings.Contains(out.SecondUnschedulable, string(scheduler.ReasonVolumeLimitExceeded)) {
		t.Errorf("second pod unschedulable with %q, want the reason %s", out.SecondUnschedulable, scheduler.ReasonVolumeLimitExceeded)
	}
	if node, _ := waitPlaced(t, ctx, ns, "first"); node != "node-slot" {
		t.Errorf("first on %s, want node-slot", node)
	}
}
