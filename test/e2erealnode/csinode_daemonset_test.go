package e2erealnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// mockOverlay is the quick start's kustomization: the base, every
// component, the mock driver.
const mockOverlay = kubeletnode.MockOverlay

// renderMockOverlay renders mockOverlay as kustomize does and returns its
// objects as one JSON stream, and the node DaemonSet.
func renderMockOverlay(t *testing.T) ([]byte, *appsv1.DaemonSet) {
	t.Helper()
	objs, err := controlplane.RenderKustomization(filepath.Join(cluster.RepoRoot, mockOverlay))
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(append(stream, data...), '\n')
		if o.GetKind() == "DaemonSet" && o.GetName() == "csi-node" {
			ds = &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil {
		t.Fatalf("%s renders no DaemonSet csi-node", mockOverlay)
	}
	return stream, ds
}

// TestRealNodeDeployNodeDaemonSet applies deploy/'s mock overlay, rendered
// by kustomize, as a vendor applies it: its node DaemonSet (the mock
// driver's node plugin, node-driver-registrar, csi-node-publisher) runs on
// every real node, unchanged but for the registrar, the lab's stand-in
// under upstream's image name. Kubelet then registers the driver on each
// node: every container runs and is ready, the CSINode entry has the
// node's ID and the mock's zone key, and the Node the zone deploy/'s mock
// configuration gives it.
func TestRealNodeDeployNodeDaemonSet(t *testing.T) {
	ctx := context.Background()
	stream, ds := renderMockOverlay(t)
	if err := nodes.TagImages(ctx, ds.Spec.Template.Spec.Containers...); err != nil {
		t.Fatal(err)
	}
	if err := cluster.ApplyYAML(ctx, stream, false); err != nil {
		t.Fatalf("applying %s: %v", mockOverlay, err)
	}
	t.Cleanup(func() { uninstallOverlay(ctx, t) })
	key := driver.TopologyPrefix + "zone"
	zones := map[string]string{realNodes[0]: "z1", realNodes[1]: "z2"}
	var last string
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		if running, msg := daemonSetRunning(ctx, ds); !running {
			last = msg
			return false, nil
		}
		for _, name := range realNodes {
			csiNode, err := cluster.Client.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver.DefaultName })
			if i < 0 || csiNode.Spec.Drivers[i].NodeID != name || !slices.Contains(csiNode.Spec.Drivers[i].TopologyKeys, key) {
				last = fmt.Sprintf("CSINode %s: %+v", name, csiNode.Spec.Drivers)
				return false, nil
			}
			node, err := cluster.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || node.Labels[key] != zones[name] {
				last = fmt.Sprintf("node %s: %s=%q, want %q (%v)", name, key, node.Labels[key], zones[name], err)
				return false, nil
			}
		}
		last = registrarMissing()
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("kubelet never registered the DaemonSet's driver on every node: %v; last: %s; pods: %s", err, last, daemonSetPods(ctx, ds))
	}
}

// registrarMissing says on which node the registrar does not serve
// kubelet's plugin registration yet (its socket in kubelet's
// plugins_registry), or "". The CSINode entry alone cannot tell:
// csi-node-publisher writes it too, and it did while the registrar, then
// running as 65532, could not reach the root driver's socket and never
// registered.
func registrarMissing() string {
	for _, n := range nodes.Nodes {
		sock := n.HostPath(filepath.Join(kubeletnode.KubeletRoot, "plugins_registry", driver.DefaultName+"-reg.sock"))
		if _, err := os.Stat(sock); err != nil {
			return fmt.Sprintf("node %s: the registrar serves no registration: %v", n.Name, err)
		}
	}
	return ""
}

// daemonSetRunning says whether the DaemonSet has a pod on every real node
// with every container running and ready, and if not, what it has.
func daemonSetRunning(ctx context.Context, ds *appsv1.DaemonSet) (bool, string) {
	pods, err := cluster.Client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		ready := p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == len(ds.Spec.Template.Spec.Containers)
		for _, c := range p.Status.ContainerStatuses {
			ready = ready && c.Ready
		}
		running[p.Spec.NodeName] = running[p.Spec.NodeName] || ready
	}
	for _, name := range realNodes {
		if !running[name] {
			return false, "pods:" + daemonSetPods(ctx, ds)
		}
	}
	return true, ""
}

// daemonSetPods says where the DaemonSet's pods are and how they are.
func daemonSetPods(ctx context.Context, ds *appsv1.DaemonSet) string {
	pods, err := cluster.Client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		fmt.Fprintf(&b, "\n%s on %q: %s", pods.Items[i].Name, pods.Items[i].Spec.NodeName, podStatus(&pods.Items[i]))
	}
	return b.String()
}
