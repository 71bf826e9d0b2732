package e2eextender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
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
	checkFilterAnswer(t, ctx, ns, "node-bare")
}

func scrapeExtender(t *testing.T, ctx context.Context) testutil.Metrics {
	t.Helper()
	return lab.MustScrape(t, ctx, "http://"+healthAddr+"/metrics")
}

// checkFilterAnswer asks the extender's /filter directly, for a pod that
// no node fits (so only the extender judges it), about node-z1-a and bare:
// bare is failed as unresolvable (preempting pods there cannot help), and
// node-z1-a alone passes. A malformed body is answered 400.
func checkFilterAnswer(t *testing.T, ctx context.Context, ns, bare string) {
	t.Helper()
	lab.NewClaim(t, ctx, env.Cluster, ns, "probe", ns, 1<<30)
	lab.NewPod(t, ctx, env.Cluster, ns, "probe", lab.PodOptions{Claims: []string{"probe"},
		NodeSelector: map[string]string{"example.com/nowhere": "true"}})
	pod, err := client.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"node-z1-a", bare}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	var res extenderv1.ExtenderFilterResult
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		code, answer := postFilter(ctx, body)
		var got extenderv1.ExtenderFilterResult
		if code != http.StatusOK || json.Unmarshal(answer, &got) != nil {
			return false, nil
		}
		res = got
		_, unresolvable := res.FailedAndUnresolvableNodes[bare]
		return unresolvable && res.NodeNames != nil && len(*res.NodeNames) == 1 && (*res.NodeNames)[0] == "node-z1-a", nil
	}); err != nil {
		var kept []string
		if res.NodeNames != nil {
			kept = *res.NodeNames
		}
		t.Errorf("filter of node-z1-a and %s: kept %v, failed %v, unresolvable %v; want %s unresolvable and node-z1-a kept: %v",
			bare, kept, res.FailedNodes, res.FailedAndUnresolvableNodes, bare, err)
	}
	if code, answer := postFilter(ctx, []byte("{oops")); code != http.StatusBadRequest {
		t.Errorf("malformed body: %d %s, want 400", code, answer)
	}
}

// postFilter posts body to the extender's /filter and returns the status
// and the answer (0 when the request fails).
func postFilter(ctx context.Context, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/filter", bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil
	}
	return resp.StatusCode, answer
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
