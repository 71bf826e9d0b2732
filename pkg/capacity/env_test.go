package capacity

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testdriver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testobjects"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	testDriver = driver.DefaultName
	zoneKey    = driver.TopologyPrefix + "zone"
	gi         = int64(1) << 30
)

// startMock serves a mock driver controller in-process on a unix socket,
// with the zones z1, z2 and z3 of 10 GiB each.
func startMock(t *testing.T, ctx context.Context) (*driver.Driver, csi.ControllerClient) {
	t.Helper()
	return testdriver.StartController(t, ctx, "capacity", nil)
}

func zoneTopo(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: map[string]string{zoneKey: z}})
	}
	return out
}

// makeNode is the Node name in zone (no zone label where zone is empty).
func makeNode(name, zone string) *v1.Node { return testobjects.Node(name, zoneKey, zone) }

// makeCSINode is node name's CSINode with testDriver's entry of these keys.
func makeCSINode(name string, keys ...string) *storagev1.CSINode {
	return testobjects.CSINode(name, testDriver, keys...)
}

// makeClass is the class name of testDriver; it waits for the first consumer.
func makeClass(name string) testobjects.Class { return testobjects.NewClass(name, testDriver) }
