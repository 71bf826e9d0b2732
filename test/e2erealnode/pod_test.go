package e2erealnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// podTimeout bounds a pod's start on a loaded 2-core machine.
const podTimeout = 3 * time.Minute

// rwcheckPod is a pod bound to node whose only container, the lab's
// rwcheck image (never pulled), writes text to an emptyDir volume and reads
// it back. It mounts no service-account token: the plane runs no root CA
// publisher.
func rwcheckPod(name, node, text string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                     node,
			RestartPolicy:                v1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []v1.Container{{
				Name:            "rwcheck",
				Image:           nodes.Images.Ref(kubeletnode.RWCheck),
				ImagePullPolicy: v1.PullNever,
				Args:            []string{"-file=/data/check", "-text=" + text},
				VolumeMounts:    []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		},
	}
}

// TestRealNodeRunsPod runs, on each real node, a pod of the lab's own
// image that writes to its volume and reads the data back: the pod
// succeeds, its termination message is what it read, and the node's
// containerd ran its sandbox from the lab's pause image.
func TestRealNodeRunsPod(t *testing.T) {
	ctx := context.Background()
	for _, n := range nodes.Nodes {
		t.Run(n.Name, func(t *testing.T) {
			text := "written on " + n.Name
			pod := rwcheckPod("rwcheck-"+n.Name, n.Name, text)
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
			out, err := n.Ctr(ctx, "containers", "list")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, nodes.Images.Sandbox) {
				t.Errorf("node %s's containerd ran no sandbox from %s; its containers:\n%s", n.Name, nodes.Images.Sandbox, out)
			}
		})
	}
}

// waitFinished waits until the pod has succeeded or failed, and returns it.
func waitFinished(ctx context.Context, t *testing.T, namespace, name string) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never finished: %v; status: %s", namespace, name, err, podStatus(got))
	}
	return got
}

func terminationMessage(p *v1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return s.State.Terminated.Message
		}
	}
	return ""
}

func podStatus(p *v1.Pod) string {
	if p == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s", c.Type, c.Status, c.Message)
	}
	for _, s := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "; container %s: %+v", s.Name, s.State)
	}
	return b.String()
}
