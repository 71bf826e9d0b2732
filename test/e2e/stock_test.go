package e2e

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
