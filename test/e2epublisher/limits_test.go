package e2epublisher

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// ourEntries returns the node's CSINode entries of the mock driver.
func ourEntries(ctx context.Context, node string) ([]storagev1.CSINodeDriver, string, error) {
	cn, err := client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	var out []storagev1.CSINodeDriver
	for _, d := range cn.Spec.Drivers {
		if d.Name == driverName {
			out = append(out, d)
		}
	}
	return out, cn.ResourceVersion, nil
}

func waitCount(t *testing.T, ctx context.Context, node string, want int32) string {
	t.Helper()
	var rv string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		entries, v, err := ourEntries(ctx, node)
		if err != nil || len(entries) != 1 || entries[0].Allocatable == nil || entries[0].Allocatable.Count == nil {
			return false, nil
		}
		rv = v
		return *entries[0].Allocatable.Count == want, nil
	})
	if err != nil {
		entries, _, _ := ourEntries(ctx, node)
		t.Fatalf("CSINode %s: entries %+v, want one with count %d: %v", node, entries, want, err)
	}
	return rv
}

// The published count drives the stock
// scheduler's NodeVolumeLimits; restarting with --reserved-volumes=1 lowers
// it without duplicating the entry.
func TestVolumeLimits(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	const node = "node-limited"
	if err := env.AddNode(ctx, lab.NodeSpec{Name: node, Zone: "z1", Rack: "r1", Driver: true, MaxVolumes: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.StopPublisher(node)
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node, metav1.DeleteOptions{})
		delete(env.Nodes, node)
	})
	waitCount(t, ctx, node, 2)

	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	prefer := &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
		Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}},
	}}}}
	for i := 0; i < 3; i++ {
		claim := fmt.Sprintf("data-%d", i)
		lab.NewClaim(t, ctx, env.Cluster, ns, claim, class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{claim}, Affinity: prefer})
		lab.WaitBound(t, ctx, env.Cluster, ns, claim)
		got := lab.WaitPodNode(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i))
		if i < 2 && got != node {
			t.Fatalf("app-%d on %s, want %s (it prefers that node, which has room)", i, got, node)
		}
		if i == 2 && got == node {
			t.Fatalf("app-2 on %s although its 2 volumes are in use", node)
		}
	}

	// Restart with one reserved volume: the count drops to 1, one entry.
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartPublisher(ctx, node, "--reserved-volumes=1", "--resync-period=500ms", "-v=4", "--http-endpoint="+addr); err != nil {
		t.Fatal(err)
	}
	rv := waitCount(t, ctx, node, 1)
	// No flapping: once current, resyncs (every 500ms) write nothing. Wait
	// for the publisher to have resynced several times, then compare.
	logPath := env.Publisher(node).LogPath()
	if err := env.Cluster.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(logPath)
		return strings.Count(string(data), "CSINode entry already current") >= 4, nil
	}); err != nil {
		t.Fatalf("publisher did not resync: %v", err)
	}
	entries, now, err := ourEntries(ctx, node)
	if err != nil || len(entries) != 1 || now != rv {
		t.Errorf("after resyncs: %d entries, resourceVersion %s -> %s (%v); want one entry and no writes", len(entries), rv, now, err)
	}

	// The publisher's own metrics tell the same story: driver up,
	// count 1, the first publish and at least four resyncs, no error, no
	// collision.
	m := lab.MustScrape(t, ctx, "http://"+addr+"/metrics")
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"csi_node_publisher_driver_up", nil, 1},
		{"csi_node_publisher_allocatable_count", nil, 1},
		{"csi_node_publisher_publish_total", map[string]string{"result": "error"}, 0},
		{"csi_node_publisher_label_collisions_total", nil, 0},
	} {
		if got := lab.MetricValue(m, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
	if got := lab.MetricValue(m, "csi_node_publisher_publish_total", map[string]string{"result": "success"}); got < 5 {
		t.Errorf("csi_node_publisher_publish_total{result=success} = %v, want at least 5 (the publish and four resyncs)", got)
	}
	if got := lab.HTTPStatus(ctx, "http://"+addr+"/healthz"); got != http.StatusOK {
		t.Errorf("publisher /healthz = %d, want 200", got)
	}
}

// A node label that collides with the driver's
// topology is reported and not overwritten.
func TestTopologyLabelCollision(t *testing.T) {
	ctx, _ := lab.NewNamespace(t, env.Cluster, "e2e-")
	const node = "node-collide"
	err := env.AddNode(ctx, lab.NodeSpec{Name: node, Zone: "z2", Rack: "r1", Driver: true, DriverTopology: "zone=z3,rack=r1"})
	t.Cleanup(func() {
		env.StopPublisher(node)
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node, metav1.DeleteOptions{})
		delete(env.Nodes, node)
	})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("publisher with a colliding label: %v, want it to exit", err)
	}
	if perr := env.Publisher(node).Wait(); perr == nil {
		t.Error("publisher exited with status 0 on a label collision")
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || n.Labels[zoneKey] != "z2" {
		t.Errorf("node zone label = %q (%v), want the original z2", n.Labels[zoneKey], err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return strings.Contains(lab.EventsOf(ctx, env.Cluster, "default", "Node", node), "TopologyLabelCollision"), nil
	}); err != nil {
		t.Errorf("no collision Event on the node: %v", err)
	}
	if entries, _, _ := ourEntries(ctx, node); len(entries) != 0 {
		t.Errorf("CSINode entry published despite the collision: %+v", entries)
	}
}

// The publisher's ServiceAccount may read and write
// CSINodes and Nodes as it needs, and nothing more.
func TestPublisherRBAC(t *testing.T) {
	ctx, _ := lab.NewNamespace(t, env.Cluster, "e2e-")
	kc, err := env.Cluster.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-node-publisher")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.StorageV1().CSINodes().Get(ctx, "node-z1-a", metav1.GetOptions{}); err != nil {
		t.Errorf("get CSINode: %v", err)
	}
	if _, err := sa.CoreV1().Nodes().Get(ctx, "node-z1-a", metav1.GetOptions{}); err != nil {
		t.Errorf("get Node: %v", err)
	}
	for name, call := range map[string]func() error{
		"list nodes": func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"delete CSINode": func() error {
			return sa.StorageV1().CSINodes().Delete(ctx, "node-z1-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"update Node": func() error {
			n, _ := client.CoreV1().Nodes().Get(ctx, "node-z1-a", metav1.GetOptions{})
			_, err := sa.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"read secrets": func() error { _, err := sa.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); return err },
		"list PVs":     func() error { _, err := sa.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); return err },
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", name, err)
		}
	}
}
