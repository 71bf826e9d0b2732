package e2eplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A WaitForFirstConsumer claim cloning a claim whose
// volume is reachable from zone z1 only, used by a pod that prefers zone
// z2: the plugin keeps the pod off every node out of the source's reach,
// so the claim is selected for a z1 node the first time.
func TestCloneLandsInSourceZone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	env.StaticSourceClaim(t, ctx, ns, class, "src", "z1", gi)
	env.CloneClaimAndPod(t, ctx, ns, class, "clone", "src", "z2", gi)
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

// Every csi-topology-scheduler this package started ran
// the CSITopology plugin and kept kube-scheduler's pod signatures on: none
// logged "Disabling signatures for profile because plugins do not support
// it". Each said once that VolumeSnapshots are not served (the snapshot
// CRDs are absent here), and never again while it looked for them.
func TestSchedulerKeepsSignatures(t *testing.T) {
	logs, err := filepath.Glob(filepath.Join(env.Cluster.LogDir, "kube-scheduler*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no scheduler log in %s: %v", env.Cluster.LogDir, err)
	}
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if !strings.Contains(text, "CSITopology plugin ready") {
			t.Errorf("%s: the CSITopology plugin was not built", path)
		}
		if strings.Contains(text, "Disabling signatures for profile because plugins do not support it") {
			t.Errorf("%s: kube-scheduler turned pod signatures off", path)
		}
		if n := strings.Count(text, `"Optional API not served; looked for again until it is" api="VolumeSnapshots`); n != 1 {
			t.Errorf("%s: said %d times that VolumeSnapshots are not served, want once (no retry loop in the log)", path, n)
		}
	}
}
