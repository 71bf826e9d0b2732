package e2erealnode

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// installNamespace is where deploy/ installs everything.
const installNamespace = kubeletnode.InstallNamespace

// zoneLabel is the well-known zone label the kind quick start gives its
// workers (deploy/kind/cluster.yaml); nodeZones are the real nodes' zones,
// as the kind workers of the same names have them, and as the mock overlay's
// node-topology.yaml gives the driver.
const zoneLabel = kubeletnode.ZoneLabel

var nodeZones = map[string]string{realNodes[0]: "z1", realNodes[1]: "z2"}

// installOverlay installs deploy/'s mock overlay (install).
func installOverlay(ctx context.Context, t *testing.T) *kubeletnode.Install {
	t.Helper()
	return install(ctx, t, mockOverlay)
}

// install applies deploy/'s kustomization at path as a vendor does
// (kubeletnode.Nodes.Install) and waits until every workload runs. It is
// removed when the test ends.
func install(ctx context.Context, t *testing.T, path string) *kubeletnode.Install {
	t.Helper()
	in, err := kubeletnode.RenderInstall(cluster.RepoRoot, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uninstallOverlay(ctx, t) })
	if err := nodes.Install(ctx, cluster, in, nodeZones, 3*podTimeout); err != nil {
		t.Fatal(err)
	}
	return in
}

// uninstallOverlay deletes the install's namespace and waits until it is
// gone (its pods with it), then the CSIDriver, forgets the driver's
// registrations (forgetDriver) and empties the mock's data directory on
// every node: the mock numbers its volumes from 1 again when its
// controller restarts, and never removes a deleted volume's data from the
// nodes, so the next install's first volume would find the data of this
// one's. The cluster-scoped RBAC and classes stay: applying the overlay
// again updates them.
func uninstallOverlay(ctx context.Context, t *testing.T) {
	_ = cluster.Client.CoreV1().Namespaces().Delete(ctx, installNamespace, metav1.DeleteOptions{})
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, installNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s is still there: %v; pods: %s", installNamespace, err, kubeletnode.NamespacePods(ctx, cluster, installNamespace))
	}
	_ = cluster.Client.StorageV1().CSIDrivers().Delete(ctx, driver.DefaultName, metav1.DeleteOptions{})
	forgetDriver(ctx, t, realNodes...)
	for _, n := range nodes.Nodes {
		entries, err := os.ReadDir(mockDataDir(n))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Error(err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(mockDataDir(n), e.Name())); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
			}
		}
	}
}
