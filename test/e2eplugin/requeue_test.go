package e2eplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// A pod the plugin rejects for capacity is retried when capacity is
// published, not only by kube-scheduler's 5-minute flush of unschedulable
// pods: the plugin registers CSIStorageCapacity events (EventsToRegister).
func TestPendingForCapacityRetriedWhenRoomAppears(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	// Larger than any zone's free capacity (at most 100 Gi in this lab).
	const size = 150 * gi
	env.ClaimAndPod(t, ctx, ns, class, "big", size, "")
	var why string
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
				why = c.Message
				return strings.Contains(c.Message, string(scheduler.ReasonInsufficientCapacity)), nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod not rejected for capacity: %v (last condition %q)", err, why)
	}
	// Let kube-scheduler's backoff of the first attempt (at most 10 s) pass,
	// so that only an event can bring the pod back before the flush.
	// Without this pause, one full run of the package placed the pod only
	// 61 s after the room appeared (not explained yet); with it, in seconds.
	time.Sleep(12 * time.Second)
	// Room for the claim in z2 only. Not lab.EnsureRoom: it waits until the
	// room is published, and by then the pod may already have taken it.
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raised := false
	var restore func()
	for _, seg := range segs {
		if seg.Topology[lab.ZoneKey] != "z2" {
			continue
		}
		topo, old := seg.Topology, seg.CapacityBytes
		if err := env.SetSegmentCapacity(ctx, topo, seg.UsedBytes+size); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.SetSegmentCapacity(context.WithoutCancel(ctx), topo, old) })
		restore = func() {
			if err := env.SetSegmentCapacity(ctx, topo, old); err != nil {
				t.Fatal(err)
			}
			// The later tests score zones by their published free
			// capacity: wait until none in z2 shows the extra room.
			if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
				list, err := client.StorageV1().CSIStorageCapacities(lab.CapacityNamespace).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, nil
				}
				for _, c := range list.Items {
					if c.NodeTopology != nil && c.NodeTopology.MatchLabels[lab.ZoneKey] == "z2" && c.Capacity != nil && c.Capacity.Value() > old {
						return false, nil
					}
				}
				return true, nil
			}); err != nil {
				t.Fatalf("z2's published capacity stays above %d bytes: %v", old, err)
			}
		}
		raised = true
	}
	if !raised {
		t.Fatal("the mock driver has no segment in z2")
	}
	published := time.Now()
	node, zone := env.WaitPlaced(t, ctx, ns, "big")
	took := time.Since(published)
	t.Logf("placed on %s (volume in %s) %s after the driver had room", node, zone, took.Round(100*time.Millisecond))
	if zone != "z2" {
		t.Errorf("volume in %s, want z2 (the only zone with room)", zone)
	}
	// The provisioner publishes the room within its 3 s poll, and the
	// capacity event requeues the pod at once; only a missing registration
	// would leave it to the flush, 5 minutes after it was rejected.
	if took > time.Minute {
		t.Errorf("placed %s after the driver had room, want under a minute", took)
	}
	// Give z2 its 150 Gi back before EnsureRoom's cleanup lowers its
	// capacity again: the later tests count on the zones' free capacity.
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("volume %s of the deleted claim still there: %v", pvc.Spec.VolumeName, err)
	}
	restore()
}
