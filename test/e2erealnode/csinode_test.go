package e2erealnode

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// driverPod is the mock driver's node plugin on a real node, with the lab's
// registrar beside it, as deploy/'s node DaemonSet runs them, with its
// paths: the driver's socket in /var/lib/kubelet/plugins/<driver>/, the
// registrar's in kubelet's plugins_registry/ (each node has its own
// /var/lib/kubelet, see kubeletnode.NodePaths). Both run as root: the driver creates its
// socket as root, and mounts. The driver sees kubelet's pods/ directory at
// the path kubelet names in NodePublishVolume, with Bidirectional mount
// propagation, and keeps the volumes' data in /var/lib/csi-mock on the node
// (mockDataDir on the host), bind-mounted onto the targets.
func driverPod(n *kubeletnode.Node, zone string) *v1.Pod {
	pluginDir := filepath.Join(kubeletnode.KubeletRoot, "plugins", driver.DefaultName)
	hostPath := func(name, path string, t v1.HostPathType) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	root := &v1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-node-" + n.Name, Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                     n.Name,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []v1.Container{{
				Name:            "csi-driver",
				Image:           nodes.Images.Ref("mock-driver"),
				ImagePullPolicy: v1.PullNever,
				Args: []string{"--mode=node", "--endpoint=unix:///csi/csi.sock", "--node-id=" + n.Name, "--node-topology=zone=" + zone,
					"--data-dir=" + mockData},
				SecurityContext: &v1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false), Privileged: ptr.To(true)},
				VolumeMounts: []v1.VolumeMount{
					{Name: "plugin-dir", MountPath: "/csi"},
					{Name: "pods-dir", MountPath: filepath.Join(kubeletnode.KubeletRoot, "pods"), MountPropagation: ptr.To(v1.MountPropagationBidirectional)},
					{Name: "mock-data", MountPath: mockData},
				},
			}, {
				Name:            "registrar",
				Image:           nodes.Images.Ref(kubeletnode.Registrar),
				ImagePullPolicy: v1.PullNever,
				Args:            []string{"--csi-address=/csi/csi.sock", "--kubelet-registration-path=" + filepath.Join(pluginDir, "csi.sock")},
				SecurityContext: root,
				VolumeMounts:    []v1.VolumeMount{{Name: "plugin-dir", MountPath: "/csi"}, {Name: "registration-dir", MountPath: "/registration"}},
			}},
			Volumes: []v1.Volume{
				hostPath("plugin-dir", pluginDir, v1.HostPathDirectoryOrCreate),
				hostPath("registration-dir", filepath.Join(kubeletnode.KubeletRoot, "plugins_registry"), v1.HostPathDirectory),
				hostPath("pods-dir", filepath.Join(kubeletnode.KubeletRoot, "pods"), v1.HostPathDirectory),
				hostPath("mock-data", mockData, v1.HostPathDirectoryOrCreate),
			},
		},
	}
}

// TestRealNodeKubeletWritesCSINode runs the mock driver's node plugin and
// the registrar on a real node: kubelet registers the driver, asks it
// NodeGetInfo, and writes the driver's entry in the node's CSINode (node
// ID, topology key) and its topology label on the Node.
func TestRealNodeKubeletWritesCSINode(t *testing.T) {
	ctx := context.Background()
	n := nodes.Nodes[0]
	startDriver(ctx, t, n, "z1")
	key := driver.TopologyPrefix + "zone"
	node, err := cluster.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Labels[key]; got != "z1" {
		t.Errorf("node %s: label %s=%q, want z1 (kubelet copies the driver's topology)", n.Name, key, got)
	}
}

// forgetDriver deletes the CSINode objects of nodes once their driver pods
// are gone, so that the next test sees kubelet register its driver anew
// (kubelet creates the object again then). Kubelet was seen to keep a
// stopped driver's entry in this lab; that is left to find out.
func forgetDriver(ctx context.Context, t *testing.T, nodeNames ...string) {
	t.Helper()
	for _, name := range nodeNames {
		if err := cluster.Client.StorageV1().CSINodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CSINode %s: %v", name, err)
		}
	}
}

// mockData is the mock driver's data directory on every node, as deploy/
// names it; mockDataDir is where node n keeps it on the host.
const mockData = "/var/lib/csi-mock"

func mockDataDir(n *kubeletnode.Node) string { return n.HostPath(mockData) }

// startDriver runs driverPod on n (deleted when the test ends) and waits
// until kubelet has registered the driver: its entry in n's CSINode, with
// n's name as node ID and the mock's zone key.
func startDriver(ctx context.Context, t *testing.T, n *kubeletnode.Node, zone string) {
	t.Helper()
	pod := driverPod(n, zone)
	if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{})
		if err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
			_, err := cluster.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("driver pod %s never went away: %v", pod.Name, err)
		}
		forgetDriver(ctx, t, n.Name)
	})
	key := driver.TopologyPrefix + "zone"
	var last string
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		csiNode, err := cluster.Client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == driver.DefaultName {
				last = fmt.Sprintf("%+v", d)
				return d.NodeID == n.Name && slices.Contains(d.TopologyKeys, key), nil
			}
		}
		last = fmt.Sprintf("drivers %+v", csiNode.Spec.Drivers)
		return false, nil
	})
	if err != nil {
		p, _ := cluster.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		t.Fatalf("kubelet never wrote %s's entry in CSINode %s: %v; last: %s; driver pod: %s", driver.DefaultName, n.Name, err, last, podStatus(p))
	}
}
