package e2erealnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// TestRealNodeDaemonSetOwnsCapacity installs deploy/'s node-local overlay
// with --capacity-ownerref-level=1 given to csi-provisioner (a kustomize
// patch over the overlay, as a vendor who wants upstream's ownership
// writes): each node's CSIStorageCapacity object is controlled by the
// node DaemonSet, as upstream's default makes it, and a rolling restart of
// the DaemonSet's pods deletes none of them: after every node runs a new
// pod, the objects are the same (name and UID), still the DaemonSet's.
func TestRealNodeDaemonSetOwnsCapacity(t *testing.T) {
	ctx := context.Background()
	path := ownerLevelOverlay(t, 1)
	in, err := kubeletnode.RenderInstall(cluster.RepoRoot, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uninstallOverlay(ctx, t) })
	if err := nodes.Install(ctx, cluster, in, nodeZones, 3*podTimeout); err != nil {
		t.Fatal(err)
	}
	ds, err := cluster.Client.AppsV1().DaemonSets(in.Node.Namespace).Get(ctx, in.Node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := waitDaemonSetOwnsCapacity(ctx, t, ds.Name, ds.UID)
	old := map[string]types.UID{}
	for _, n := range realNodes {
		p, msg := nodePodRunning(ctx, ds, n)
		if p == nil {
			t.Fatalf("no node DaemonSet pod ready on %s: %s", n, msg)
		}
		old[n] = p.UID
	}
	rollDaemonSet(ctx, t, ds)
	for _, n := range realNodes {
		waitDriverPod(ctx, t, ds, n, old[n])
	}
	after := waitDaemonSetOwnsCapacity(ctx, t, ds.Name, ds.UID)
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("CSIStorageCapacity %s (UID %s) did not survive the rolling restart: now UID %q", name, uid, after[name])
		}
	}
}

// ownerLevelOverlay writes a kustomization over deploy/'s node-local
// overlay that adds --capacity-ownerref-level=level to the node
// DaemonSet's csi-provisioner, and returns its path relative to the
// repository's root (what RenderInstall takes).
func ownerLevelOverlay(t *testing.T, level int) string {
	t.Helper()
	base, err := kubeletnode.RenderInstall(cluster.RepoRoot, nodeLocalOverlay)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(base.Node.Spec.Template.Spec.Containers, func(c v1.Container) bool { return c.Name == "csi-provisioner" })
	if i < 0 {
		t.Fatalf("%s: no csi-provisioner container in DaemonSet %s", nodeLocalOverlay, base.Node.Name)
	}
	dir := t.TempDir()
	overlay, err := filepath.Rel(dir, filepath.Join(cluster.RepoRoot, nodeLocalOverlay))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - target: {kind: DaemonSet, name: %s}
    patch: |-
      - {op: test, path: /spec/template/spec/containers/%d/name, value: csi-provisioner}
      - {op: add, path: /spec/template/spec/containers/%d/args/-, value: --capacity-ownerref-level=%d}
`, overlay, base.Node.Name, i, i, level)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(cluster.RepoRoot, dir)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// waitDaemonSetOwnsCapacity waits until every real node has a capacity
// object of nodeLocalClass and each such object's only owner, its
// controller, is the DaemonSet (name, uid); it returns their UIDs by name.
func waitDaemonSetOwnsCapacity(ctx context.Context, t *testing.T, name string, uid types.UID) map[string]types.UID {
	t.Helper()
	var got map[string]types.UID
	var last string
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.StorageV1().CSIStorageCapacities(installNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = map[string]types.UID{}
		nodesSeen := map[string]bool{}
		for _, c := range list.Items {
			if c.StorageClassName != nodeLocalClass || c.NodeTopology == nil {
				continue
			}
			o := c.OwnerReferences
			if len(o) != 1 || o[0].Kind != "DaemonSet" || o[0].Name != name || o[0].UID != uid || o[0].Controller == nil || !*o[0].Controller {
				last = fmt.Sprintf("CSIStorageCapacity %s: owners %+v", c.Name, o)
				return false, nil
			}
			got[c.Name] = c.UID
			nodesSeen[c.NodeTopology.MatchLabels[hostnameLabel]] = true
		}
		for _, n := range realNodes {
			if !nodesSeen[n] {
				last = "no CSIStorageCapacity for node " + n
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the capacity objects never were the DaemonSet %s's alone: %v; last: %s", name, err, last)
	}
	return got
}
