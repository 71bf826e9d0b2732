package e2eextender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// An upgrade that keeps the previous release's flags (--driver-name
// --kubeconfig --listen --http-endpoint, no --heartbeat-namespace) under the
// shipped RBAC (deploy/kubernetes/components/scheduler-extender/rbac.yaml,
// which grants the heartbeat Leases in csi-topology only) keeps serving:
//   - outside a pod (no $NAMESPACE, no service account file) the Leases
//     are looked for in all namespaces, which RBAC forbids: the extender
//     serves anyway, every node counting as live, and says so once;
//   - in its pod ($NAMESPACE=csi-topology, as the shipped Deployment sets
//     it from the downward API) the heartbeat namespace defaults to the
//     pod's own and the Leases are read.
func TestExtenderPreviousReleaseFlags(t *testing.T) {
	for _, tc := range []struct {
		name, namespace string
		forbidden       bool
	}{
		{name: "outside a pod", forbidden: true},
		{name: "in its pod", namespace: lab.PublisherNamespace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			listen, err := lab.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			health, err := lab.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			p, err := env.Cluster.StartProcess("csi-scheduler-extender-upgrade-"+strings.ReplaceAll(tc.name, " ", "-"),
				filepath.Join(env.BinDir, "csi-scheduler-extender"),
				[]string{"--driver-name=" + lab.DriverName, "--kubeconfig=" + extenderKubeconfig, "--listen=" + listen, "--http-endpoint=" + health},
				[]string{"NAMESPACE=" + tc.namespace})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Stop(5 * time.Second) })
			// It serves /filter within seconds: it never waits for the Leases.
			var result extenderv1.ExtenderFilterResult
			if err := env.Cluster.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
				var err error
				result, err = filterNoVolumes(ctx, "http://"+listen+"/filter")
				return err == nil, nil
			}); err != nil {
				t.Fatalf("the extender does not serve /filter 30 s after it started: %v\n%s", err, p.LogTail(20))
			}
			if result.Error != "" || result.NodeNames == nil || len(*result.NodeNames) == 0 {
				t.Errorf("filter of a pod without volumes = %+v, want every node kept", result)
			}
			want := "Optional API may not be listed (RBAC)"
			if err := env.Cluster.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) {
				data, err := os.ReadFile(p.LogPath())
				return err == nil && strings.Contains(string(data), `"Optional API served" api="driver heartbeat Leases`) != tc.forbidden &&
					strings.Contains(string(data), want) == tc.forbidden, nil
			}); err != nil {
				t.Errorf("log does not say whether the heartbeat Leases are read (forbidden: %v):\n%s", tc.forbidden, p.LogTail(30))
			}
			if data, err := os.ReadFile(p.LogPath()); err == nil && strings.Count(string(data), want) > 1 {
				t.Errorf("log says %d times %q, want at most once", strings.Count(string(data), want), want)
			}
		})
	}
}

// filterNoVolumes posts a filter request for a pod without volumes on the
// lab's nodes.
func filterNoVolumes(ctx context.Context, url string) (extenderv1.ExtenderFilterResult, error) {
	var result extenderv1.ExtenderFilterResult
	nodes := make([]string, 0, len(env.Nodes))
	for n := range env.Nodes {
		nodes = append(nodes, n)
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{
		Pod:       &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}},
		NodeNames: &nodes,
	})
	if err != nil {
		return result, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return result, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return result, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return result, json.NewDecoder(resp.Body).Decode(&result)
}
