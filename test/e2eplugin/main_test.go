// Package e2eplugin runs the companion scheduler filter end to end: the local
// control plane with csi-topology-scheduler (kube-scheduler with the
// CSITopology plugin) as its scheduler, the mock driver, csi-node-publisher
// and csi-provisioner with capacity tracking.
package e2eplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// schedulerConfig runs the CSITopology plugin in the cluster's only
// scheduler profile.
var schedulerConfig = lab.PluginSchedulerConfig(lab.PluginScheduler{})

// serviceAccountConfig is schedulerConfig for csi-topology-scheduler running
// under its ServiceAccount with the RBAC of
// deploy/kubernetes/components/scheduler-plugin, with leader election on
// the Lease that RBAC grants, reading the driver heartbeat Leases in the
// namespace that RBAC grants. The lease timings tolerate an API server
// slowed down by a loaded machine (a renewal may take seconds): a scheduler
// that loses its lease exits, and nothing schedules after that. Restarts
// stay quick because kube-scheduler releases its lease when stopped.
var serviceAccountConfig = lab.PluginSchedulerConfig(lab.PluginScheduler{
	LeaderElection: []string{"leaderElect: true", "resourceName: csi-topology-scheduler", "resourceNamespace: csi-topology",
		"leaseDuration: 40s", "renewDeadline: 30s", "retryPeriod: 1s"},
	Args: []string{"heartbeatNamespace: csi-topology"},
})

const gi = int64(1) << 30

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	return controlplane.RunTestMainWithOurScheduler(m, schedulerConfig, func(ctx context.Context, c *controlplane.Cluster) error {
		var err error
		env, err = lab.Setup(ctx, c, lab.Config{
			Zones: []string{"z1", "z2", "z3"}, NodesPerZone: 2, CapacityBytes: 100 * gi,
			ZoneCapacity:    map[string]int64{"z1": 60 * gi, "z2": 60 * gi, "z3": 100 * gi},
			ProvisionerArgs: []string{"--enable-capacity", "--capacity-namespace=csi-topology", "--capacity-poll-interval=3s"},
		})
		client = c.Client
		if err != nil {
			return err
		}
		return runSchedulerAsServiceAccount(ctx, c)
	})
}

// runSchedulerAsServiceAccount restarts csi-topology-scheduler under its
// ServiceAccount and the RBAC file deploy/ ships, so every test of this
// package runs it with exactly those rules.
func runSchedulerAsServiceAccount(ctx context.Context, c *controlplane.Cluster) error {
	rbac := filepath.Join(c.RepoRoot, "deploy", "kubernetes", "components", "scheduler-plugin", "rbac.yaml")
	if err := c.ApplyFile(ctx, rbac, false); err != nil {
		return err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-topology-scheduler")
	if err != nil {
		return err
	}
	c.SetSchedulerCredentials(kubeconfig)
	if err := c.SetSchedulerConfig(serviceAccountConfig); err != nil {
		return err
	}
	c.StopScheduler()
	if err := c.StartScheduler(ctx); err != nil {
		return err
	}
	// It holds its Lease: its leader election works under these rules.
	return c.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases("csi-topology").Get(ctx, "csi-topology-scheduler", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
}
