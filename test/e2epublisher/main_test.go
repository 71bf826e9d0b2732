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
	os.Exit(lab.RunTestMain(m, controlplane.Options{}, lab.ZonesAndRacks(), func(_ context.Context, l *lab.Lab) error {
		env, client = l, l.Cluster.Client
		return nil
	}))
}
