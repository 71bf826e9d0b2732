package e2estock

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Stock side (test/e2eplugin and test/e2eextender run ours): the stock
// scheduler sends a pod that prefers a node without the driver to that node
// again and again; its claim never provisions and the pod stays Pending.
func TestStockSchedulerNodeWithoutDriver(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	const node = "node-stock-bare"
	if err := env.AddNode(ctx, lab.NodeSpec{Name: node, Zone: "z1", Rack: "r1"}); err != nil {
		t.Fatal(err)
	}
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	prefer := &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{Weight: 100, Preference: v1.NodeSelectorTerm{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}, Affinity: prefer})
	t.Cleanup(func() {
		lab.DeletePod(t, context.WithoutCancel(ctx), env.Cluster, ns, "app")
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node, metav1.DeleteOptions{})
		delete(env.Nodes, node)
	})
	// Wait until the claim has been sent back at least twice for that node.
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		n := int32(0)
		for _, e := range list.Items {
			if e.InvolvedObject.Name == "data" && e.Reason == "ProvisioningFailed" {
				n += e.Count
			}
		}
		return n >= 2, nil
	})
	if err != nil {
		t.Fatalf("claim not sent back twice: %v%s", err, lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"))
	}
	pod, err := client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != "" {
		t.Errorf("pod bound to %q (%v), want it Pending", pod.Spec.NodeName, err)
	}
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase == v1.ClaimBound {
		t.Errorf("claim %s (%v), want it unprovisioned", pvc.Status.Phase, err)
	}
}

// Stock side (test/e2eplugin TestPreferredBurst runs
// the same burst with ours): with capacity tracking on (CSIDriver
// storageCapacity and published CSIStorageCapacity objects), 20 pods x 10 Gi
// that prefer zone z1, against zones with 60, 60 and 100 Gi free. The stock
// scheduler checks each claim alone against the published capacity and
// ignores the claims in flight, so it sends more than six to z1: CreateVolume
// calls are wasted (RESOURCE_EXHAUSTED, or a volume made outside z1 that the
// provisioner deletes) and claims come back to the scheduler.
func TestStockBurstOvercommits(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	env.EnableStorageCapacity(t, ctx)
	if err := env.StartProvisioner("--enable-capacity", "--capacity-namespace="+lab.CapacityNamespace, "--capacity-poll-interval=2s"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	res := env.RunBurst(t, ctx, ns, class, lab.StandardBurst)
	t.Logf("stock scheduler: %d of %d pods placed, volumes per zone %v, %d CreateVolume calls (%d RESOURCE_EXHAUSTED), %d claims sent back",
		len(res.Placed), lab.StandardBurst.Pods, res.PerZone, res.CreateCalls, res.Exhausted, res.Reschedules)
	if res.CreateCalls <= lab.StandardBurst.Pods || res.Reschedules == 0 {
		t.Errorf("%d CreateVolume calls for %d claims, %d reschedules: the stock scheduler did not overcommit z1 (want more calls than claims, and reschedules)",
			res.CreateCalls, lab.StandardBurst.Pods, res.Reschedules)
	}
}

// Stock side (test/e2eplugin runs ours): the stock
// scheduler counts attached volumes by the pods it has bound or assumed.
// After a restart (the first pod deleted and created again meanwhile) it
// knows nothing of the first claim, selected for the one-slot node and
// being provisioned: it sends the second pod's claim to the same node, and
// the first pod can then never run there.
func TestStockForgetsPendingClaimAcrossRestart(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "e2e-")
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-slot", Zone: "z2", Rack: "r1", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	env.EnsureRoom(t, ctx, ns, "z2", 4<<30)
	out := env.PendingClaimAcrossRestart(t, ctx, ns, ns, "node-slot")
	if !out.SecondSelected {
		t.Fatalf("the stock scheduler refused the second pod (%q); this test expects it to forget the pending claim", out.SecondUnschedulable)
	}
	// Both claims are now provisioned for node-slot; the first pod waits
	// for a slot that the second one holds.
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("first pod not reported unschedulable: %v", err)
	}
	for _, name := range []string{"first", "second"} {
		if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && pvc.Status.Phase == v1.ClaimBound, nil
		}); err != nil {
			t.Errorf("claim %s not provisioned: %v", name, err)
		}
	}
}
