package e2eextender

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

// A stock kube-scheduler with our extender keeps pods
// off a node where the driver is not registered.
func TestExtenderFiltersNodeWithoutDriver(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-bare", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), "node-bare", metav1.DeleteOptions{})
	})
	// The extender's own metrics, on its plain --http-endpoint, count what
	// it did: every filter call of these pods saw node-bare (a small
	// cluster: the scheduler sends every feasible node) and rejected it.
	before := scrapeExtender(t, ctx)
	for i := 0; i < 3; i++ {
		env.ClaimAndPod(t, ctx, ns, ns, fmt.Sprintf("app-%d", i), 1<<30, "node-bare")
	}
	for i := 0; i < 3; i++ {
		if node, _ := env.WaitPlaced(t, ctx, ns, fmt.Sprintf("app-%d", i)); node == "node-bare" {
			t.Errorf("app-%d placed on the node without the driver", i)
		}
	}
	after := scrapeExtender(t, ctx)
	delta := func(metric string, labels map[string]string) float64 {
		return lab.MetricValue(after, metric, labels) - lab.MetricValue(before, metric, labels)
	}
	filters := delta("csi_scheduler_extender_requests_total", map[string]string{"verb": "filter", "code": "200"})
	if filters < 3 {
		t.Errorf("requests_total{filter,200} grew by %v, want at least 3 (one per pod)", filters)
	}
	if got := delta("csi_scheduler_extender_rejected_nodes_total", map[string]string{"reason": "CSIDriverNotRegistered"}); got != filters {
		t.Errorf("rejected_nodes_total{CSIDriverNotRegistered} grew by %v, want %v (node-bare once per filter call)", got, filters)
	}
	if got := delta("csi_scheduler_extender_request_duration_seconds_count", map[string]string{"verb": "filter"}); got != filters {
		t.Errorf("request_duration_seconds_count{filter} grew by %v, want %v", got, filters)
	}
	if got := delta("csi_scheduler_extender_requests_total", map[string]string{"code": "400"}); got != 0 {
		t.Errorf("requests_total{code=400} grew by %v, want 0", got)
	}
}

func scrapeExtender(t *testing.T, ctx context.Context) testutil.Metrics {
	t.Helper()
	m, err := lab.Scrape(ctx, "http://"+healthAddr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// With `ignorable: true`, pods are still scheduled
// while the extender is down.
func TestExtenderDownIgnorable(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	extender.Stop(15 * time.Second)
	t.Cleanup(func() {
		if err := startExtender(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("restarting the extender: %v", err)
		}
	})
	env.ClaimAndPod(t, ctx, ns, ns, "app", 1<<30, "node-z2-a")
	env.WaitPlaced(t, ctx, ns, "app")
}

// The other setting: with `ignorable: false`, a pod
// with a delayed-binding volume waits while the extender is down, with the
// scheduler's error on its condition, and is scheduled once it is back.
func TestExtenderDownNotIgnorable(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	restart := func(ctx context.Context, ignorable bool) error {
		if err := env.Cluster.SetSchedulerConfig(fmt.Sprintf(schedulerConfig, addr, ignorable)); err != nil {
			return err
		}
		env.Cluster.StopScheduler()
		return env.Cluster.StartScheduler(ctx)
	}
	if err := restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(context.WithoutCancel(ctx), true); err != nil {
			t.Errorf("restoring the scheduler: %v", err)
		}
	})
	extender.Stop(15 * time.Second)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = startExtender(context.WithoutCancel(ctx))
		}
	})
	env.ClaimAndPod(t, ctx, ns, ns, "app", 1<<30, "node-z2-a")
	var message string
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod scheduled to %s while the non-ignorable extender is down", pod.Spec.NodeName)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
				message = c.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod not held back: %v", err)
	}
	t.Logf("while the extender is down: %s", message)
	if err := startExtender(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	env.WaitPlaced(t, ctx, ns, "app")
}
