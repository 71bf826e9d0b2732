// Package chaos is the project's chaos suite (issue 13): one seeded run of
// claims, Immediate and WaitForFirstConsumer with pods, on the local control
// plane with csi-topology-scheduler (the CSITopology plugin) as the
// cluster's scheduler, two csi-provisioner replicas with leader election and
// the mock driver, while faults are injected: kill -9 of the provisioner
// (the leader, or both), kill -9 of the driver's controller, CreateVolume
// slower than the provisioner's --timeout (also carried out after the
// caller gave up), claims deleted 0-3 s after they were created or
// selected (also while no provisioner runs), and with -chaos.full a
// kube-apiserver restart, a selected node deleted and a CSINode entry
// deleted during provisioning. After a settle time it fails unless nothing
// leaked and nothing is stuck (see docs/operations.md, "make chaos").
//
// go test ./test/chaos/ runs the smoke size (TestChaos with its defaults);
// make chaos runs the full size:
//
//	go test ./test/chaos/ -run TestChaos -v -args -chaos.full -chaos.claims=500 -chaos.seed=42
package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// schedulerConfig runs the CSITopology plugin in the cluster's only
// scheduler profile.
var schedulerConfig = lab.PluginSchedulerConfig(lab.PluginScheduler{})

// csiTimeout is the provisioner's --timeout; the slow-call faults outlast it.
const csiTimeout = 4 * time.Second

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
			Zones: []string{"z1", "z2"}, NodesPerZone: 2, CapacityBytes: 4 << 40,
			ProvisionerArgs: []string{"--enable-capacity", "--capacity-namespace=" + lab.CapacityNamespace,
				"--capacity-poll-interval=5s", "--timeout=" + csiTimeout.String()},
		})
		client = c.Client
		return err
	})
}
