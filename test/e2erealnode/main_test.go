// Package e2erealnode runs pods on real nodes: the local control plane with
// two kubelets, each with its own containerd (test/harness/kubeletnode), the pod
// sandbox and the containers from the lab's own images, no registry. Pods
// write and read their volumes, reach the API server with in-cluster
// configuration, and run the mock driver's node plugin, which kubelet
// registers (CSINode) and calls to publish a volume into a pod. Where the
// host cannot run real nodes (not root, no cgroup v1 controllers, runc not
// installable) the package fails and says why.
package e2erealnode

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// realNodes are the package's kubelets: two, so that every test also
// proves that nodes coexist on one host, named as the kind cluster's
// workers (deploy/kind) that deploy/'s mock overlay knows the zones of.
var realNodes = []string{"csi-topology-worker", "csi-topology-worker2"}

var (
	cluster *controlplane.Cluster
	nodes   *kubeletnode.Nodes
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{Controllers: kubeletnode.InstallControllers, AuditPolicy: auditPolicy}, func(ctx context.Context, c *controlplane.Cluster) error {
		cluster = c
		var err error
		nodes, err = kubeletnode.AddNodes(ctx, c, kubeletnode.Options{Names: realNodes}, append(slices.Clone(kubeletnode.MockOverlayImages), "csi-node-router")...)
		if err != nil {
			return err
		}
		// Before the plane's Stop: kubelets first, then their pods.
		c.OnStop(func() error { return nodes.Stop() })
		return nil
	}))
}
