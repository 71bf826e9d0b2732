// Package e2eextender runs the companion filter as an HTTP extender of a
// stock kube-scheduler on the local control plane.
package e2eextender

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{{KUBECONFIG}}"
leaderElection:
  leaderElect: false
extenders:
  - urlPrefix: "http://%s"
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: 5
    nodeCacheCapable: true
    ignorable: %t
    httpTimeout: 5s
`

var (
	env    *lab.Lab
	client kubernetes.Interface
	addr   string
	// healthAddr is the extender's --http-endpoint (plain /healthz and
	// /metrics).
	healthAddr string
	extender   *controlplane.Process
	// extenderKubeconfig acts as the extender's ServiceAccount, under the
	// RBAC of deploy/kubernetes/components/scheduler-extender.
	extenderKubeconfig string
)

func TestMain(m *testing.M) {
	var err error
	if addr, err = lab.FreeAddr(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if healthAddr, err = lab.FreeAddr(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{SchedulerConfig: fmt.Sprintf(schedulerConfig, addr, true)},
		func(ctx context.Context, c *controlplane.Cluster) error {
			var err error
			if env, err = lab.Setup(ctx, c, lab.Config{Zones: []string{"z1", "z2"}, NodesPerZone: 2, CapacityBytes: 100 << 30}); err != nil {
				return err
			}
			client = c.Client
			rbac := filepath.Join(c.RepoRoot, "deploy", "kubernetes", "components", "scheduler-extender", "rbac.yaml")
			if err := c.ApplyFile(ctx, rbac, false); err != nil {
				return err
			}
			if extenderKubeconfig, err = c.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-scheduler-extender"); err != nil {
				return err
			}
			return startExtender(ctx)
		}))
}

// startExtender runs csi-scheduler-extender on addr (and healthAddr) and
// waits for /healthz.
func startExtender(ctx context.Context) error {
	p, err := env.Cluster.StartProcess("csi-scheduler-extender", filepath.Join(env.BinDir, "csi-scheduler-extender"),
		[]string{"--driver-name=" + lab.DriverName, "--kubeconfig=" + extenderKubeconfig, "--listen=" + addr,
			"--http-endpoint=" + healthAddr, "--heartbeat-namespace=" + lab.PublisherNamespace, "-v=4"}, nil)
	if err != nil {
		return err
	}
	extender = p
	// Ready when its plain-HTTP /healthz answers (the informers have synced
	// before it listens).
	return env.Cluster.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		return lab.HTTPStatus(ctx, "http://"+healthAddr+"/healthz") == http.StatusOK, nil
	})
}
