package e2erealnode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// TestRealNodeOperations runs deploy/'s node DaemonSet on a real node and a
// pod that keeps a volume of the mock driver mounted (rwcheck -stay, which
// wrote a text to it), then operates the node, in this order:
//
//   - rolling-update: a change to the DaemonSet's pod template replaces the
//     driver's pod; the pod keeps running with its volume mounted and its
//     data, and a new pod on the claim, published by the new driver, writes
//     to the same volume;
//   - kubelet-restart: the node's kubelet restarts; the pod's container is
//     the same one, its volume still mounted, and kubelet registers the
//     driver again, writing its own count; the publisher, which resyncs
//     only hourly here, puts its count back at once (it watches the
//     CSINode);
//   - driver-killed: the driver's container is killed each time it runs
//     (a crashing driver): the publisher stops renewing the driver's
//     heartbeat Lease, which expires, and csi-scheduler-extender's filter
//     then keeps a new pod with a WaitForFirstConsumer claim of the driver
//     off the node; when the driver stays up, it is live again and the
//     node passes again.
//
// After each, the volume is checked where the pod has it: the mount on
// kubelet's target path, in the node's mount namespace, and its file.
func TestRealNodeOperations(t *testing.T) {
	ctx := context.Background()
	n := nodes.Nodes[0]
	ds, _ := deployNodeDriver(ctx, t, nodeDriver{
		node:       n.Name,
		driverArgs: []string{"--max-volumes-per-node=8"},
		// No resync in the test's time: only the publisher's watch of the
		// CSINode puts its count back after kubelet's registration writes.
		publisherArgs: []string{"--reserved-volumes=2", "--resync-period=1h",
			"--lease-duration=6s", "--lease-renew-interval=2s"},
	})
	waitDriverPod(ctx, t, ds, n.Name, "")
	k := keepVolume(ctx, t, n, "operations-volume", "kept through operations on "+n.Name)

	t.Run("rolling-update", func(t *testing.T) {
		old, msg := nodePodRunning(ctx, ds, n.Name)
		if old == nil {
			t.Fatalf("no driver pod running on %s: %s", n.Name, msg)
		}
		rollDaemonSet(ctx, t, ds)
		waitDriverPod(ctx, t, ds, n.Name, old.UID)
		k.check(ctx, t)
		// The new driver publishes the volume to a new pod, which writes
		// to it: the keeper's mount shows the same volume's new text.
		k.text = "written after the rolling update"
		second := volumePod("volume-writer-after-update", n.Name, k.pv, k.text, false)
		if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, second, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePod(ctx, t, "default", second.Name) })
		got := waitFinished(ctx, t, "default", second.Name)
		if got.Status.Phase != v1.PodSucceeded || terminationMessage(got) != "read back: "+k.text {
			t.Fatalf("pod %s on the volume after the update: %s, %q", second.Name, podStatus(got), terminationMessage(got))
		}
		k.check(ctx, t)
	})

	t.Run("kubelet-restart", func(t *testing.T) {
		// The count is the publisher's (kubelet wrote its own when the
		// updated driver registered; any kubelet write since the zero
		// time counts), so that the restarted kubelet's registration
		// writes.
		waitSettled(ctx, t, n.Name, 6, time.Time{})
		restarted := time.Now()
		if err := n.RestartKubelet(ctx, 15*time.Second, podTimeout); err != nil {
			t.Fatal(err)
		}
		// Kubelet registers the driver again and writes its own count (8);
		// the publisher, watching the CSINode, puts its own back.
		waitSettled(ctx, t, n.Name, 6, restarted)
		k.check(ctx, t)
	})

	t.Run("driver-killed", func(t *testing.T) {
		probe := newFilterProbe(ctx, t, ds.Namespace, n.Name, "z1")
		probe.waitFilter(ctx, t, n.Name, true)
		lease := heartbeat.LeaseName(driver.DefaultName, n.Name)
		stop := crashDriver(ctx, n, ds)
		silent := waitLease(ctx, t, ds.Namespace, lease, false)
		reason := probe.waitFilter(ctx, t, n.Name, false)
		kills := stop()
		t.Logf("after %d kills the driver's Lease was %s; the extender failed the node: %s", kills, silent, reason)
		waitLease(ctx, t, ds.Namespace, lease, true)
		probe.waitFilter(ctx, t, n.Name, true)
		k.check(ctx, t)
	})
}

// keptVolume is a pod that keeps a volume of the mock mounted, and what it
// wrote there.
type keptVolume struct {
	n               *kubeletnode.Node
	pod             *v1.Pod
	pv, containerID string
	text            string
}

// keepVolume creates a claim of the mock (createMockClaim) and a pod on n
// that writes text to it and keeps running (volumePod), waits until it
// runs and checks its volume.
func keepVolume(ctx context.Context, t *testing.T, n *kubeletnode.Node, id, text string) *keptVolume {
	t.Helper()
	createMockClaim(ctx, t, id)
	// Last: the volume's data, which the mock leaves on the node.
	t.Cleanup(func() {
		if err := os.RemoveAll(filepath.Join(mockDataDir(n), id)); err != nil {
			t.Error(err)
		}
	})
	pod := volumePod("volume-keeper", n.Name, id, text, true)
	if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(ctx, t, "default", pod.Name) })
	pod = waitPodRunning(ctx, t, "default", pod.Name)
	// Running is not written: wait for the text in the driver's data
	// directory on the node.
	err := cluster.WaitFor(ctx, podTimeout, func(context.Context) (bool, error) {
		data, err := os.ReadFile(filepath.Join(mockDataDir(n), id, "check"))
		return err == nil && string(data) == text, nil
	})
	if err != nil {
		t.Fatalf("pod %s never wrote its volume: %v", pod.Name, err)
	}
	k := &keptVolume{n: n, pod: pod, pv: id, containerID: pod.Status.ContainerStatuses[0].ContainerID, text: text}
	checkMounted(t, n, pod, id, text)
	return k
}

// check checks that the pod still runs its first container, unrestarted,
// with its volume mounted and holding the text.
func (k *keptVolume) check(ctx context.Context, t *testing.T) {
	t.Helper()
	checkSameContainer(ctx, t, k.pod, k.containerID)
	checkMounted(t, k.n, k.pod, k.pv, k.text)
}

// createMockClaim creates a PV of the mock driver (handle id, the data
// the node plugin keeps in its data directory) pre-bound to a PVC of the
// same name in namespace default, and the PVC; the test's cleanup
// deletes them.
func createMockClaim(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	size := resource.MustParse("1Gi")
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: size},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &v1.ObjectReference{Namespace: "default", Name: id},
			PersistentVolumeSource:        v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver.DefaultName, VolumeHandle: id}},
		},
	}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: ptr.To(""),
			VolumeName:       id,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: size}},
		},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().PersistentVolumes().Delete(ctx, id, metav1.DeleteOptions{}) })
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, id, metav1.DeleteOptions{})
	})
}

// volumePod is rwcheckPod on the claim, as root (the mock creates the
// volume's directory as root, mode 0750, and deploy/'s CSIDriver leaves
// fsGroup to the fsType, which the volume has none of); with stay it keeps
// running after its check.
func volumePod(name, node, claim, text string, stay bool) *v1.Pod {
	pod := rwcheckPod(name, node, text)
	pod.Spec.Volumes[0].VolumeSource = v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)}
	if stay {
		pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "-stay")
	}
	return pod
}

// deletePod deletes the pod and waits until it is gone (its volume
// unpublished), so that the DaemonSet's removal does not strand it.
func deletePod(ctx context.Context, t *testing.T, namespace, name string) {
	_ = cluster.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("pod %s/%s never went away: %v", namespace, name, err)
	}
}

// waitPodRunning waits until the pod runs with every container ready.
func waitPodRunning(ctx context.Context, t *testing.T, namespace, name string) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		if p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded {
			return false, fmt.Errorf("pod %s/%s ended: %s", namespace, name, podStatus(p))
		}
		ready := p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) > 0
		for _, c := range p.Status.ContainerStatuses {
			ready = ready && c.Ready
		}
		return ready, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never ran: %v; status: %s", namespace, name, err, podStatus(got))
	}
	return got
}

// waitDriverPod waits until ds runs a pod on node with every container
// ready, other than the one of UID old (when set).
func waitDriverPod(ctx context.Context, t *testing.T, ds *appsv1.DaemonSet, node string, old types.UID) {
	t.Helper()
	var last string
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		p, msg := nodePodRunning(ctx, ds, node)
		last = msg
		return p != nil && p.UID != old, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet %s never ran a new ready pod on %s: %v; %s", ds.Name, node, err, last)
	}
}

// rollDaemonSet changes the DaemonSet's pod template (an annotation), as
// an image update does: its RollingUpdate strategy replaces the pods.
func rollDaemonSet(ctx context.Context, t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e.csi-topology-provisioner.io/rolled":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	if _, err := cluster.Client.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkSameContainer checks that the pod still runs the container it ran
// (containerID), never restarted.
func checkSameContainer(ctx context.Context, t *testing.T, pod *v1.Pod, containerID string) {
	t.Helper()
	p, err := cluster.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].ContainerID != containerID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod %s no longer runs its container %s unrestarted: %s", pod.Name, containerID, podStatus(p))
	}
}

// checkMounted checks that the pod's volume is mounted on kubelet's target
// path in the node's mount namespace and holds text: what the pod's
// container sees.
func checkMounted(t *testing.T, n *kubeletnode.Node, pod *v1.Pod, pv, text string) {
	t.Helper()
	target := filepath.Join(kubeletnode.KubeletRoot, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv, "mount")
	proc := filepath.Join("/proc", strconv.Itoa(n.Kubelet().Pid()))
	mounted, err := isMountPoint(filepath.Join(proc, "mountinfo"), target)
	if err != nil {
		t.Fatal(err)
	}
	if !mounted {
		t.Errorf("pod %s's volume is not mounted on %s on node %s", pod.Name, target, n.Name)
		return
	}
	data, err := os.ReadFile(filepath.Join(proc, "root", target, "check"))
	if err != nil || string(data) != text {
		t.Errorf("pod %s's volume holds %q (%v), want %q", pod.Name, data, err, text)
	}
}

// isMountPoint says whether mountinfo (a /proc/<pid>/mountinfo) has a
// mount on path.
func isMountPoint(mountinfo, path string) (bool, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true, nil
		}
	}
	return false, sc.Err()
}

// crashDriver kills the driver's container on n each time it runs, as a
// driver that crashes at start (kubelet restarts it with a growing
// back-off), until the returned stop is called, which returns the number
// of kills.
func crashDriver(ctx context.Context, n *kubeletnode.Node, ds *appsv1.DaemonSet) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan int)
	go func() {
		killed := map[string]bool{}
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := cluster.Client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				i := slices.IndexFunc(p.Status.ContainerStatuses, func(c v1.ContainerStatus) bool { return c.Name == "csi-driver" })
				if p.Spec.NodeName != n.Name || i < 0 || p.Status.ContainerStatuses[i].State.Running == nil {
					continue
				}
				id := strings.TrimPrefix(p.Status.ContainerStatuses[i].ContainerID, "containerd://")
				if !killed[id] {
					if _, err := n.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err == nil {
						killed[id] = true
					}
				}
			}
			return false, nil
		})
		done <- len(killed)
	}()
	return func() int { cancel(); return <-done }
}

// waitLease waits until the Lease is live (or, with live false, known and
// expired), as heartbeat.LeaseLive says, and returns how long it was
// silent then.
func waitLease(ctx context.Context, t *testing.T, namespace, name string, live bool) string {
	t.Helper()
	var last string
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		l, err := cluster.Client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		isLive, silent, known := heartbeat.LeaseLive(l, time.Now())
		last = fmt.Sprintf("live %v, known %v, silent for %s", isLive, known, silent.Round(time.Millisecond))
		return known && isLive == live, nil
	})
	if err != nil {
		t.Fatalf("the driver's heartbeat Lease %s/%s never became live=%v: %v; last: %s", namespace, name, live, err, last)
	}
	return last
}
