package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

// Issue 5, scenario 1, stock side (test/e2eplugin and test/e2eextender run
// ours): the stock scheduler sends a pod that prefers a node without the
// driver to that node again and again; its claim never provisions and the
// pod stays Pending.
func TestStockSchedulerNodeWithoutDriver(t *testing.T) {
	ctx, ns := newNamespace(t)
	const node = "node-stock-bare"
	if err := env.AddNode(ctx, lab.NodeSpec{Name: node, Zone: "z1", Rack: "r1"}); err != nil {
		t.Fatal(err)
	}
	class := newClass(t, ctx, ns+"-wffc", classOpts{})
	newPVC(t, ctx, ns, "data", class)
	newPodWithAffinity(t, ctx, ns, "app", "data", &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{Weight: 100, Preference: v1.NodeSelectorTerm{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}})
	t.Cleanup(func() {
		deletePod(t, context.WithoutCancel(ctx), ns, "app")
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
		t.Fatalf("claim not sent back twice: %v%s", err, eventsOf(ctx, ns, "PersistentVolumeClaim", "data"))
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

// rescheduleEvents counts the times claims of a namespace were sent back to
// the scheduler.
func rescheduleEvents(ctx context.Context, ns string) int32 {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1
	}
	var n int32
	for _, e := range list.Items {
		if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, "asking the scheduler to pick another node") {
			n += e.Count
		}
	}
	return n
}

// Issue 5, scenario 2, stock side (test/e2eplugin runs ours): with capacity
// tracking on, 12 pods that prefer zone z1 (60 Gi free, room for 6 volumes
// of 10 Gi) are all sent there by the stock scheduler, which checks each
// claim alone and ignores claims in flight: claims come back to the
// scheduler before every pod finds room.
func TestStockBurstOvercommits(t *testing.T) {
	ctx, ns := newNamespace(t)
	if _, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec:       storagev1.CSIDriverSpec{StorageCapacity: ptr.To(true), AttachRequired: ptr.To(false)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.StartProvisioner("--enable-capacity", "--capacity-namespace=csi-topology", "--capacity-poll-interval=2s"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().CSIDrivers().Delete(context.WithoutCancel(ctx), driverName, metav1.DeleteOptions{})
		_ = env.StartProvisioner()
	})
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.Topology[zoneKey] == "z1" {
			if err := env.SetSegmentCapacity(ctx, s.Topology, s.UsedBytes+30*gi); err != nil {
				t.Fatal(err)
			}
		}
	}
	class := newClass(t, ctx, ns+"-wffc", classOpts{})
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		caps, err := segmentCapacities(ctx, class)
		return err == nil && caps["z1/r1"] == 30*gi && caps["z1/r2"] == 30*gi, nil
	}); err != nil {
		t.Fatalf("capacity of z1 not published: %v", err)
	}
	const n = 12
	for i := 0; i < n; i++ {
		env.ClaimAndPodPreferring(t, ctx, ns, class, fmt.Sprintf("burst-%02d", i), 10*gi, zoneKey, "z1")
	}
	err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return rescheduleEvents(ctx, ns) > 0, nil
	})
	if err != nil {
		t.Fatalf("no claim was sent back: the stock scheduler did not overcommit z1: %v", err)
	}
	// Count what the overcommit cost: CreateVolume calls refused for lack of
	// room, and claims sent back (ours: zero of both, test/e2eplugin).
	reqs, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range claims.Items {
		ours["pvc-"+string(c.UID)] = true // the CSI volume name (--volume-name-prefix=pvc)
	}
	exhausted := 0
	for _, r := range reqs {
		if r.Code == "ResourceExhausted" && ours[r.Name] {
			exhausted++
		}
	}
	t.Logf("stock scheduler, %d pods x 10 Gi preferring z1 (60 Gi free): %d CreateVolume RESOURCE_EXHAUSTED, %d reschedule Events",
		n, exhausted, rescheduleEvents(ctx, ns))
}

// Issue 5, scenario 3, stock side (test/e2eplugin runs ours): the stock
// scheduler counts attached volumes by the pods it has bound or assumed.
// After a restart (the first pod deleted and created again meanwhile) it
// knows nothing of the first claim, selected for the one-slot node and
// being provisioned: it sends the second pod's claim to the same node, and
// the first pod can then never run there.
func TestStockForgetsPendingClaimAcrossRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ns := "e2e-stock-restart"
	env.NamespaceWithClass(t, ctx, ns)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-slot", Zone: "z2", Rack: "r1", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	env.EnsureRoom(t, ctx, "z2", 4<<30)
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
