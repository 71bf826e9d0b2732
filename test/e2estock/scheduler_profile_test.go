package e2estock

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// The second scheduler as deploy/ ships it: csi-topology-scheduler
// runs beside the cluster's stock scheduler with the mock overlay's
// configuration (profile csi-topology-scheduler, leader election on its
// Lease) under its ServiceAccount and the component's RBAC. Pods that opt in
// with schedulerName are kept off a node without the driver even though they
// prefer it (the stock scheduler sends such a pod there:
// TestStockSchedulerNodeWithoutDriver), and their volumes are made in their
// node's zone.
func TestSecondSchedulerProfile(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	bin := t.TempDir()
	if err := controlplane.BuildProject(ctx, env.Cluster.RepoRoot, bin, "./cmd/csi-topology-scheduler"); err != nil {
		t.Fatal(err)
	}
	sched, err := env.StartSecondScheduler(ctx, bin+"/csi-topology-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Stop(10 * time.Second) })
	const bare = "node-profile-bare"
	if err := env.AddNode(ctx, lab.NodeSpec{Name: bare, Zone: "z1", Rack: "r1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), bare, metav1.DeleteOptions{})
		delete(env.Nodes, bare)
	})
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	for i := 0; i < 3; i++ {
		env.ClaimAndPodPreferring(t, ctx, ns, class, fmt.Sprintf("app-%d", i), gi, "kubernetes.io/hostname", bare, lab.ScheduledBy(lab.SecondSchedulerName))
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("app-%d", i)
		node, zone := env.WaitPlaced(t, ctx, ns, name)
		if node == bare {
			t.Errorf("%s placed on %s, which has no driver", name, bare)
		}
		if zone != env.Nodes[node] {
			t.Errorf("%s on %s in %s, volume in %s", name, node, env.Nodes[node], zone)
		}
	}
	// The pods were scheduled by the second scheduler, not the stock one.
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scheduled := 0
	for _, e := range events.Items {
		if e.Reason == "Scheduled" {
			if e.ReportingController != lab.SecondSchedulerName {
				t.Errorf("pod %s scheduled by %q, want %s", e.InvolvedObject.Name, e.ReportingController, lab.SecondSchedulerName)
			}
			scheduled++
		}
	}
	if scheduled != 3 {
		t.Errorf("%d Scheduled events, want 3", scheduled)
	}
}
