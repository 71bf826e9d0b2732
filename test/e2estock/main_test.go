// Package e2estock runs the stock side of the comparisons on the local
// control plane: the stock kube-scheduler with csi-provisioner and the mock
// driver, where test/e2eplugin and test/e2eextender run the same workloads
// with the companion filter (a node without the driver, a burst against
// published capacity, a claim in flight across a scheduler restart), and
// csi-topology-scheduler as a second scheduler beside the stock one, as
// deploy/ ships it.
package e2estock

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	gi      = int64(1) << 30
	timeout = 90 * time.Second
)

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(lab.RunTestMain(m, controlplane.Options{}, lab.ZonesAndRacks(), func(_ context.Context, l *lab.Lab) error {
		env, client = l, l.Cluster.Client
		return nil
	}))
}
