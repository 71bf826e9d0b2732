package e2eextender

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A stock kube-scheduler with our extender places a pod whose
// WaitForFirstConsumer claim clones a claim reachable from zone z1 only in
// z1, although the pod prefers z2: the claim is selected for a z1 node the
// first time.
func TestExtenderCloneLandsInSourceZone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	env.StaticSourceClaim(t, ctx, ns, ns, "src", "z1", 1<<30)
	env.CloneClaimAndPod(t, ctx, ns, ns, "clone", "src", "z2", 1<<30)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = client.CoreV1().Pods(ns).Delete(ctx, "clone", metav1.DeleteOptions{})
		_ = client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "clone", metav1.DeleteOptions{})
	})
	node := env.WaitSelectedNode(t, ctx, ns, "clone")
	if zone := env.Nodes[node]; zone != "z1" {
		t.Errorf("clone claim selected for %s in zone %q, want a node of z1 (the source's zone)", node, zone)
	}
}
