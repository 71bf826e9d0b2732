// Package e2epublisher runs csi-node-publisher end to end on the local
// control plane: the CSINode entry and volume limit it publishes (and the
// stock scheduler's NodeVolumeLimits acting on it), topology label
// collisions, the driver heartbeat Lease, and its ServiceAccount's RBAC.
package e2epublisher

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
	zoneKey    = lab.ZoneKey
	driverName = lab.DriverName
	gi         = int64(1) << 30
	timeout    = 90 * time.Second
)

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{}, func(ctx context.Context, c *controlplane.Cluster) error {
		var err error
		env, err = lab.Setup(ctx, c, lab.ZonesAndRacks())
		client = c.Client
		return err
	}))
}
