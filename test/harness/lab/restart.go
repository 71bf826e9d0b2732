package lab

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const annSelectedNode = AnnSelectedNode

// RestartOutcome is what PendingClaimAcrossRestart saw once the restarted
// scheduler had decided about the second pod.
type RestartOutcome struct {
	// SecondSelected: the second pod's claim was sent to the node although
	// the first pod's claim, still being provisioned, holds its only attach
	// slot.
	SecondSelected bool
	// SecondUnschedulable is the message of the second pod's PodScheduled
	// condition when the scheduler refused it.
	SecondUnschedulable string
}

// PendingClaimAcrossRestart plays the attach-limit scenario where the scheduler
// has nothing in memory about the pending claim: node has an allocatable
// count of 1; pod "first" (requiring node) gets its claim selected for node
// while the provisioner is down, so the claim stays pending; the scheduler
// stops (what it assumed is gone, as after a crash or a leader change) and
// the pod is deleted meanwhile (evicted, or a StatefulSet rollout: its claim
// stays, selected for node); the scheduler starts again and pod "second"
// (requiring node) is created. It returns once the second pod's claim is
// selected for node or the second pod is unschedulable, after creating pod
// "first" again and starting the provisioner (Config.ProvisionerArgs). The
// pods are removed at cleanup.
func (l *Lab) PendingClaimAcrossRestart(t testing.TB, ctx context.Context, ns, class, node string) RestartOutcome {
	t.Helper()
	c := l.Cluster.Client
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, name := range []string{"first", "second"} {
			_ = c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	})

	l.StopProvisioner()
	defer func() {
		if err := l.StartProvisioner(); err != nil {
			t.Errorf("restarting the provisioner: %v", err)
		}
	}()
	l.createClaim(t, ctx, ns, class, "first")
	l.createPinnedPod(t, ctx, ns, "first", node)
	l.waitSelected(t, ctx, ns, "first", node)

	l.Cluster.StopScheduler()
	if err := c.CoreV1().Pods(ns).Delete(ctx, "first", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// The restarted scheduler must not find the pod (a pod bound to the
	// node, with no kubelet to finish a graceful deletion, would stay).
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod first not gone before the scheduler restart: %v%s", err, l.podsOn(ctx, node))
	}
	if err := l.Cluster.StartScheduler(ctx); err != nil {
		t.Fatalf("restarting the scheduler: %v", err)
	}
	l.createClaim(t, ctx, ns, class, "second")
	l.createPinnedPod(t, ctx, ns, "second", node)
	defer l.createPinnedPod(t, ctx, ns, "first", node)

	var out RestartOutcome
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pvc.Annotations[annSelectedNode] == node {
			out.SecondSelected = true
			return true, nil
		}
		pod, err := c.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse && cond.Reason == v1.PodReasonUnschedulable {
				out.SecondUnschedulable = cond.Message + l.podsOn(ctx, node)
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the restarted scheduler never decided about the second pod: %v", err)
	}
	return out
}

// createClaim creates a 1 GiB claim of class.
func (l *Lab) createClaim(t testing.TB, ctx context.Context, ns, class, name string) {
	t.Helper()
	if _, err := l.Cluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPinnedPod creates a pod that uses the claim of the same name and
// requires node.
func (l *Lab) createPinnedPod(t testing.TB, ctx context.Context, ns, name, node string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
	}}
	if _, err := l.Cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitSelected waits until claim name has selected-node node.
func (l *Lab) waitSelected(t testing.TB, ctx context.Context, ns, name, node string) {
	t.Helper()
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := l.Cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pvc.Annotations[annSelectedNode] == node, nil
	}); err != nil {
		t.Fatalf("claim %s/%s never selected for %s: %v", ns, name, node, err)
	}
}

// EnsureRoom makes sure every segment of zone has at least bytes free
// (earlier tests may have filled it), and restores the capacities at
// cleanup. When csi-provisioner publishes CSIStorageCapacity objects for
// class, it also waits until they show the room in zone: a scheduler that
// filters by capacity must not see the zone full after the caller stops the
// provisioner (nothing would publish the room then).
func (l *Lab) EnsureRoom(t testing.TB, ctx context.Context, class, zone string, bytes int64) {
	t.Helper()
	segs, err := l.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.Topology[ZoneKey] != zone || s.CapacityBytes < 0 || s.CapacityBytes-s.UsedBytes >= bytes {
			continue
		}
		topo, old := s.Topology, s.CapacityBytes
		if err := l.SetSegmentCapacity(ctx, topo, s.UsedBytes+bytes); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.SetSegmentCapacity(context.WithoutCancel(ctx), topo, old) })
	}
	var published []int64
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		list, err := l.Cluster.Client.StorageV1().CSIStorageCapacities(CapacityNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		published = published[:0]
		for _, c := range list.Items {
			if c.StorageClassName != class || c.NodeTopology == nil || c.NodeTopology.MatchLabels[ZoneKey] != zone {
				continue
			}
			var have int64
			if c.Capacity != nil {
				have = c.Capacity.Value()
			}
			if have < bytes {
				published = append(published, have)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the published capacity of class %s in zone %s stays below %d bytes: %v (%v)", class, zone, bytes, published, err)
	}
}

// podsOn describes, for failure messages, the pods bound to node and the
// claims selected for it: what a scheduler can count against its limit.
func (l *Lab) podsOn(ctx context.Context, node string) string {
	c := l.Cluster.Client
	out := ""
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Sprintf("; listing pods on %s: %v", node, err)
	}
	for _, p := range pods.Items {
		out += fmt.Sprintf("; pod %s/%s on %s (deleting: %v)", p.Namespace, p.Name, node, p.DeletionTimestamp != nil)
	}
	claims, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return out + fmt.Sprintf("; listing claims: %v", err)
	}
	for _, pvc := range claims.Items {
		if pvc.Annotations[annSelectedNode] == node {
			out += fmt.Sprintf("; claim %s/%s selected for %s (%s)", pvc.Namespace, pvc.Name, node, pvc.Status.Phase)
		}
	}
	if out == "" {
		out = "; no pod on " + node
	}
	return out
}
