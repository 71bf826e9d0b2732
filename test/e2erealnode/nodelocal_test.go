package e2erealnode

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeLocalOverlay is deploy/'s node deployment with the mock as a
// node-local driver; nodeLocalClass its class.
const (
	nodeLocalOverlay = "deploy/kubernetes/overlays/node-local"
	nodeLocalClass   = "csi-node-local"
	hostnameLabel    = "kubernetes.io/hostname"
)

// TestRealNodeDeployNodeLocal installs deploy/'s node-local overlay as a
// vendor does: csi-provisioner with --node-deployment in the node
// DaemonSet, beside the mock serving both services with its node as the
// segment. A StatefulSet of its class gets one volume per node, each PV's
// node affinity its pod's node, and each pod writes to its volume and reads
// it back. Each capacity object is owned by its node, as
// docs/node-deployment.md says of ours (upstream's default,
// --capacity-ownerref-level=1, has the DaemonSet own them).
func TestRealNodeDeployNodeLocal(t *testing.T) {
	ctx := context.Background()
	install(ctx, t, nodeLocalOverlay)
	sts := webStatefulSet(int32(len(realNodes)), nodeLocalClass, hostnameLabel)
	if _, err := cluster.Client.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWeb(ctx, t, sts) })
	pods := waitWeb(ctx, t, sts, nil)
	checkPlacement(t, pods, hostnameLabel, func(node string) string { return node })
	list, err := cluster.Client.StorageV1().CSIStorageCapacities(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]bool{}
	for _, c := range list.Items {
		if c.StorageClassName != nodeLocalClass || c.NodeTopology == nil {
			continue
		}
		node := c.NodeTopology.MatchLabels[hostnameLabel]
		if o := c.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != node {
			t.Errorf("CSIStorageCapacity %s of node %s: owners %+v, want the Node", c.Name, node, o)
		}
		owned[node] = true
	}
	for _, name := range realNodes {
		if !owned[name] {
			t.Errorf("no CSIStorageCapacity of class %s for node %s", nodeLocalClass, name)
		}
	}
}
