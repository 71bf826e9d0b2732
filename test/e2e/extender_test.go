package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

// The csi-scheduler-extender binary, on its
// informers of the real cluster, filters out a node where the driver is not
// registered as unresolvable and keeps the nodes that have it.
func TestExtenderFilter(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := env.Cluster.StartProcess("csi-scheduler-extender", filepath.Join(env.BinDir, "csi-scheduler-extender"),
		[]string{"--driver-name=" + driverName, "--kubeconfig=" + env.Cluster.Kubeconfig, "--listen=" + addr, "-v=4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(15 * time.Second) })
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-ext-bare", Zone: "z1", Rack: "r1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), "node-ext-bare", metav1.DeleteOptions{})
		delete(env.Nodes, "node-ext-bare")
	})
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	// The pod never schedules (no node has this label): only the extender judges it.
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{"example.com/nowhere": "true"}})
	pod, err := client.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"node-z1-a", "node-ext-bare"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/filter", bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		res = extenderv1.ExtenderFilterResult{}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&res) != nil {
			return false, nil
		}
		_, bare := res.FailedAndUnresolvableNodes["node-ext-bare"]
		return bare && res.NodeNames != nil && len(*res.NodeNames) == 1 && (*res.NodeNames)[0] == "node-z1-a", nil
	})
	if err != nil {
		t.Fatalf("extender filter result %+v: %v", res, err)
	}
	resp, err := http.Post("http://"+addr+"/filter", "application/json", bytes.NewReader([]byte("{oops")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body: %d, want 400", resp.StatusCode)
	}
}
