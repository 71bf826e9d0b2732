package e2erealnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// createStaticVolume creates the mock's CSIDriver (no attach: the plane runs
// no attach/detach controller; fsGroupPolicy File: kubelet gives a pod's
// fsGroup the volume, which the mock creates as root with mode 0750), and a
// PV of the mock with volume handle id
// pre-bound to a PVC of the same name in namespace default, and the PVC
// (createMockClaim).
func createStaticVolume(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	csiDriver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driver.DefaultName},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: ptr.To(storagev1.FileFSGroupPolicy)},
	}
	if _, err := cluster.Client.StorageV1().CSIDrivers().Create(ctx, csiDriver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.StorageV1().CSIDrivers().Delete(ctx, csiDriver.Name, metav1.DeleteOptions{})
	})
	createMockClaim(ctx, t, id)
}

// TestRealNodePodWritesCSIVolume runs a pod with a volume of the mock
// driver on a real node: kubelet asks the driver's node plugin to publish
// it (NodePublishVolume on kubelet's target path, which the driver, in its
// own container, bind-mounts from its data directory; Bidirectional
// propagation carries the mount to the host, where the pod's container
// gets it), and the pod, as the image's non-root user with fsGroup, writes
// to it and reads the data back. The data is
// then on the node, in the driver's data directory.
func TestRealNodePodWritesCSIVolume(t *testing.T) {
	ctx := context.Background()
	n := nodes.Nodes[len(nodes.Nodes)-1]
	startDriver(ctx, t, n, "z2")
	const id = "real-node-volume-1"
	createStaticVolume(ctx, t, id)
	text := "kept by the mock on " + n.Name
	pod := rwcheckPod("volume-writer", n.Name, text)
	pod.Spec.Volumes[0].VolumeSource = v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: id}}
	// The image's user (65532) writes the volume through its group.
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](imagebuild.NonRootUID)}
	if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	got := waitFinished(ctx, t, "default", pod.Name)
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s: phase %s, want Succeeded; status: %s", pod.Name, got.Status.Phase, podStatus(got))
	}
	if msg := terminationMessage(got); msg != "read back: "+text {
		t.Errorf("pod %s read back %q, want %q", pod.Name, msg, "read back: "+text)
	}
	data, err := os.ReadFile(filepath.Join(mockDataDir(n), id, "check"))
	if err != nil {
		t.Fatalf("the volume's data is not in the driver's data directory on the node: %v", err)
	}
	if string(data) != text {
		t.Errorf("the node keeps %q for the volume, want %q", data, text)
	}
}
