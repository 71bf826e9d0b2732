package e2erealnode

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// TestRealNodeDrainNodeLocal drains a real node as `kubectl drain` does
// while a StatefulSet uses a node-local volume there (deploy/'s node-local
// overlay): the node is cordoned and every pod on it but the DaemonSet's
// is evicted through the Eviction API. As docs/node-deployment.md ("A
// drained node") says:
//
//   - the StatefulSet's new pod stays Pending: its claim is bound to a PV
//     whose node affinity is the cordoned node, and nothing hands a bound
//     claim back;
//   - the node's DaemonSet pod (driver, csi-provisioner, publisher) keeps
//     running, so the node's instance still serves its volumes;
//   - uncordoned, the node takes the pod back: it runs there again and
//     reads what the first pod wrote;
//   - drained again, the operator who gives the data up deletes the claim
//     and the pod:
//     the StatefulSet makes both again, the scheduler places the pod on
//     the other node, its instance provisions a new volume there, and the
//     drained node's instance deletes the old volume (reclaim Delete).
//
// The node is uncordoned at the end.
func TestRealNodeDrainNodeLocal(t *testing.T) {
	ctx := context.Background()
	in := install(ctx, t, nodeLocalOverlay)
	sts := webStatefulSet(1, nodeLocalClass, hostnameLabel)
	if _, err := cluster.Client.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWeb(ctx, t, sts) })
	first := waitWeb(ctx, t, sts, nil)["web-0"]
	drained, other := first.node, realNodes[0]
	if other == drained {
		other = realNodes[1]
	}
	nodePod, msg := nodePodRunning(ctx, in.Node, drained)
	if nodePod == nil {
		t.Fatalf("no node DaemonSet pod ready on %s: %s", drained, msg)
	}
	t.Cleanup(func() { setUnschedulable(ctx, t, drained, false) })
	drainNode(ctx, t, drained)
	waitUnschedulable(ctx, t, sts.Namespace, "web-0", first.uid)

	// Uncordoned, the node takes its pod back, with the data.
	setUnschedulable(ctx, t, drained, false)
	back := waitWeb(ctx, t, sts, map[string]types.UID{"web-0": first.uid})["web-0"]
	if back.node != drained || back.pv.Name != first.pv.Name || back.read != first.read {
		t.Errorf("web-0 after the uncordon: on %s, PV %s, read %q; want on %s, PV %s, read %q",
			back.node, back.pv.Name, back.read, drained, first.pv.Name, first.read)
	}

	drainNode(ctx, t, drained)
	pending := waitUnschedulable(ctx, t, sts.Namespace, "web-0", back.uid)
	claim, err := cluster.Client.CoreV1().PersistentVolumeClaims(sts.Namespace).Get(ctx, "data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Spec.VolumeName != first.pv.Name || claim.Status.Phase != v1.ClaimBound {
		t.Errorf("claim data-web-0 of the pending pod: volume %q, phase %s; want still bound to %s", claim.Spec.VolumeName, claim.Status.Phase, first.pv.Name)
	}
	if p, msg := nodePodRunning(ctx, in.Node, drained); p == nil || p.UID != nodePod.UID {
		t.Errorf("the node DaemonSet's pod on the drained node %s did not keep running: %s", drained, msg)
	}

	// The operator gives the data up: the claim, then the pod.
	if err := cluster.Client.CoreV1().PersistentVolumeClaims(sts.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, "claim "+claim.Name, func(ctx context.Context) error {
		got, err := cluster.Client.CoreV1().PersistentVolumeClaims(sts.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err == nil && got.UID != claim.UID {
			return apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), claim.Name)
		}
		return err
	})
	if err := cluster.Client.CoreV1().Pods(sts.Namespace).Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitWeb(ctx, t, sts, map[string]types.UID{"web-0": pending.UID})
	checkPlacement(t, again, hostnameLabel, func(node string) string { return node })
	if got := again["web-0"]; got.node != other || got.pv.Name == first.pv.Name {
		t.Errorf("web-0 after its claim was deleted: on %s with PV %s, want on %s with a new PV", got.node, got.pv.Name, other)
	}
	waitGone(ctx, t, "the drained node's PV "+first.pv.Name, func(ctx context.Context) error {
		_, err := cluster.Client.CoreV1().PersistentVolumes().Get(ctx, first.pv.Name, metav1.GetOptions{})
		return err
	})
	setUnschedulable(ctx, t, drained, false)
}

// drainNode does what `kubectl drain --ignore-daemonsets` does: it
// cordons the node, evicts every pod on it that no DaemonSet controls
// (policy/v1 Eviction), and waits until they are gone.
func drainNode(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	setUnschedulable(ctx, t, node, true)
	pods, err := cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var evicted []v1.Pod
	for _, p := range pods.Items {
		if o := metav1.GetControllerOf(&p); o != nil && o.Kind == "DaemonSet" {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		if err := cluster.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("evicting pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		evicted = append(evicted, p)
	}
	for _, p := range evicted {
		waitGone(ctx, t, fmt.Sprintf("evicted pod %s/%s", p.Namespace, p.Name), func(ctx context.Context) error {
			got, err := cluster.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && got.UID != p.UID {
				return apierrors.NewNotFound(v1.Resource("pods"), p.Name)
			}
			return err
		})
	}
	t.Logf("drained %s: evicted %d pods", node, len(evicted))
}

// setUnschedulable cordons (true) or uncordons the node, as kubectl does.
func setUnschedulable(ctx context.Context, t *testing.T, node string, unschedulable bool) {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	got, err := cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Errorf("setting node %s unschedulable=%t: %v", node, unschedulable, err)
		return
	}
	if got.Spec.Unschedulable != unschedulable {
		t.Errorf("node %s: unschedulable %t, want %t", node, got.Spec.Unschedulable, unschedulable)
	}
}

// waitUnschedulable waits until the pod (another than old) has been
// found unschedulable by its scheduler (PodScheduled False, reason
// Unschedulable) and returns it.
func waitUnschedulable(ctx context.Context, t *testing.T, namespace, name string, old types.UID) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID == old {
			return false, nil
		}
		got = p
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s/%s was scheduled to %s", namespace, name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				t.Logf("pod %s/%s is Pending: %s", namespace, name, c.Message)
				// kube-scheduler's VolumeBinding and NodeUnschedulable.
				for _, want := range []string{"didn't match PersistentVolume's node affinity", "were unschedulable"} {
					if !strings.Contains(c.Message, want) {
						t.Errorf("pod %s/%s: the scheduler's message does not say %q", namespace, name, want)
					}
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		status := "not there"
		if got != nil {
			status = podStatus(got)
		}
		t.Fatalf("pod %s/%s never was found unschedulable: %v; status: %s; install: %s", namespace, name, err,
			status, kubeletnode.NamespacePods(ctx, cluster, installNamespace))
	}
	return got
}

// waitGone waits until get returns NotFound for what.
func waitGone(ctx context.Context, t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		t.Fatalf("%s is still there: %v", what, err)
	}
}
