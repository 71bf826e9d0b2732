// Package e2esource runs claims with data sources (clones, snapshot
// restores, populators) and VolumeAttributesClasses through csi-provisioner
// and the mock driver on the local control plane, with the VolumeSnapshot
// CRDs installed from the pinned external-snapshotter client module. No
// snapshot controller runs: the tests create VolumeSnapshot and
// VolumeSnapshotContent objects and their status as the snapshotter would,
// after a real CreateSnapshot call to the mock driver.
package e2esource

import (
	"context"
	"os"
	"testing"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

var (
	env    *lab.Lab
	client kubernetes.Interface
	snaps  snapclientset.Interface
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{SnapshotCRDs: true},
		func(ctx context.Context, c *controlplane.Cluster) error {
			var err error
			if snaps, err = snapclientset.NewForConfig(c.RESTConfig); err != nil {
				return err
			}
			client = c.Client
			// Regional snapshots, as the clouds' zonal disks have: a
			// restore's zone is the provisioner's choice, not the driver's.
			env, err = lab.Setup(ctx, c, lab.Config{Zones: []string{"z1", "z2"}, NodesPerZone: 1, CapacityBytes: 100 << 30,
				ControllerArgs: []string{"--regional-snapshots"}})
			return err
		}))
}
