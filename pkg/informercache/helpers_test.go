package informercache

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testobjects"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	testDriver = driver.DefaultName
	zoneKey    = driver.TopologyPrefix + "zone"

	annSelectedNode = storagehelpers.AnnSelectedNode
)

// makeNode is the Node name in zone (no zone label where zone is empty).
func makeNode(name, zone string) *v1.Node { return testobjects.Node(name, zoneKey, zone) }

// makeCSINode is node name's CSINode with testDriver's entry of these keys.
func makeCSINode(name string, keys ...string) *storagev1.CSINode {
	return testobjects.CSINode(name, testDriver, keys...)
}
