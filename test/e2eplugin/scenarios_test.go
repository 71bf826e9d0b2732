package e2eplugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const timeout = lab.WorkloadTimeout

// A node without the driver is filtered, so a
// pod that prefers it runs elsewhere. (The stock scheduler sends such a pod
// there and it stays Pending: test/e2e TestSelectedNodeGone.)
func TestNodeWithoutDriverFiltered(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-bare", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		env.ClaimAndPod(t, ctx, ns, class, fmt.Sprintf("app-%d", i), gi, "node-bare")
	}
	for i := 0; i < 3; i++ {
		node, zone := env.WaitPlaced(t, ctx, ns, fmt.Sprintf("app-%d", i))
		if node == "node-bare" || zone != env.Nodes[node] {
			t.Errorf("app-%d on %s (zone %s), volume in %s", i, node, env.Nodes[node], zone)
		}
	}
}

// A claim still being provisioned for a node
// counts against the node's attach limit, so a second pod does not go there.
func TestPendingClaimCountsAgainstLimit(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-one", Zone: "z3", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(4 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	env.ClaimAndPod(t, ctx, ns, class, "first", gi, "node-one")
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "first", metav1.GetOptions{})
		return err == nil && pvc.Annotations["volume.kubernetes.io/selected-node"] == "node-one", nil
	}); err != nil {
		t.Fatalf("first claim not selected for node-one: %v", err)
	}
	env.ClaimAndPod(t, ctx, ns, class, "second", gi, "node-one")
	if node, _ := env.WaitPlaced(t, ctx, ns, "first"); node != "node-one" {
		t.Errorf("first on %s, want node-one", node)
	}
	if node, _ := env.WaitPlaced(t, ctx, ns, "second"); node == "node-one" {
		t.Error("second pod placed on node-one although its only attach slot is taken by a pending claim")
	}
}

// The selected node is deleted between Filter
// and provisioning: the claim is rescheduled and provisioned elsewhere.
func TestNodeDeletedBeforeProvisioning(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-doomed", Zone: "z1", Driver: true}); err != nil {
		t.Fatal(err)
	}
	env.StopProvisioner()
	t.Cleanup(func() {
		if env.Provisioner() == nil {
			_ = env.StartProvisioner()
		}
	})
	env.ClaimAndPod(t, ctx, ns, class, "first", gi, "node-doomed")
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
	node, zone := env.WaitPlaced(t, ctx, ns, "first")
	if node == "node-doomed" || zone != env.Nodes[node] {
		t.Errorf("first on %s (zone %s), volume in %s", node, env.Nodes[node], zone)
	}
}

// Ours (test/e2estock TestStockBurstOvercommits runs the same burst with the
// stock scheduler): with capacity tracking on, 20 pods x
// 10 Gi preferring z1, against zones of 60, 60 and 100 Gi free. Every pod
// runs, at most six volumes go to z1, no zone is over capacity, the driver
// never answers RESOURCE_EXHAUSTED and no claim is sent back.
func TestPreferredBurst(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	env.EnableStorageCapacity(t, ctx)
	b := lab.StandardBurst
	res := env.RunBurst(t, ctx, ns, class, b)
	t.Logf("ours: %d of %d pods placed, volumes per zone %v, %d CreateVolume calls (%d RESOURCE_EXHAUSTED), %d claims sent back",
		len(res.Placed), b.Pods, res.PerZone, res.CreateCalls, res.Exhausted, res.Reschedules)
	checkBurst(t, b, res)
}

// The same burst without a zone preference, last because it
// fills the zones: the same burst spread by our score alone.
func TestBurstRespectsCapacity(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	b := lab.StandardBurst
	b.Prefer = ""
	res := env.RunBurst(t, ctx, ns, class, b)
	t.Logf("volumes per zone: %v", res.PerZone)
	checkBurst(t, b, res)
}

// Volume limits across a scheduler restart: the first pod's
// claim, selected for a one-slot node in a scheduling cycle that ended with
// the restart (and its pod deleted and created again meanwhile), still
// counts against the node's limit, so the second pod is refused and the
// first pod runs there. (Stock: test/e2estock
// TestStockForgetsPendingClaimAcrossRestart.)
func TestPendingClaimCountsAcrossRestart(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-slot", Zone: "z2", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	env.EnsureRoom(t, ctx, class, "z2", 4*gi) // the burst tests fill the zones
	out := env.PendingClaimAcrossRestart(t, ctx, ns, class, "node-slot")
	if out.SecondSelected {
		t.Fatal("second pod's claim sent to node-slot although the first pod's pending claim holds its only attach slot")
	}
	if !strings.Contains(out.SecondUnschedulable, string(scheduler.ReasonVolumeLimitExceeded)) {
		t.Errorf("second pod unschedulable with %q, want the reason %s", out.SecondUnschedulable, scheduler.ReasonVolumeLimitExceeded)
	}
	if node, _ := env.WaitPlaced(t, ctx, ns, "first"); node != "node-slot" {
		t.Errorf("first on %s, want node-slot", node)
	}
}

// checkBurst asserts what ours promises for a burst: every pod runs, in the
// zone of its volume, no zone holds more than it had free, the driver never
// answers RESOURCE_EXHAUSTED and no claim is sent back.
func checkBurst(t *testing.T, b lab.Burst, res lab.BurstResult) {
	t.Helper()
	if len(res.Placed) != b.Pods {
		t.Errorf("%d of %d pods placed", len(res.Placed), b.Pods)
	}
	for z, n := range res.PerZone {
		if int64(n)*b.Size > b.Free[z] {
			t.Errorf("zone %s holds %d volumes of %d Gi, %d Gi free", z, n, b.Size>>30, b.Free[z]>>30)
		}
	}
	if len(res.Misplaced) > 0 || res.Exhausted != 0 || res.Reschedules != 0 {
		t.Errorf("misplaced %v, RESOURCE_EXHAUSTED %d, reschedules %d; want none", res.Misplaced, res.Exhausted, res.Reschedules)
	}
	if res.CreateCalls != b.Pods {
		t.Errorf("%d CreateVolume calls for %d claims, want one each", res.CreateCalls, b.Pods)
	}
}
