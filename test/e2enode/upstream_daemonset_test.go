package e2enode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// labelManagedBy is the label by which each node's instance, upstream's
// and ours, finds its capacity objects.
const labelManagedBy = "csi.storage.k8s.io/managed-by"

// upstreamDaemonSet is the DaemonSet upstream's node deployment runs in: a
// real apps/v1 DaemonSet in the capacity namespace (upstream's objects live
// in its pods' namespace), under the ServiceAccount csi-node-provisioner,
// whose pods kube-controller-manager's DaemonSet controller creates, one
// per node, and the scheduler binds. No kubelet runs them: each node's
// upstream process stands for its pod's container, with POD_NAME naming
// that pod, so that upstream's default --capacity-ownerref-level=1 resolves
// the pod to its controller, the DaemonSet, and makes the DaemonSet the
// owner of the node's capacity objects.
type upstreamDaemonSet struct {
	*appsv1.DaemonSet
	// pods are the names of its pods by node.
	pods map[string]string
}

// createUpstreamDaemonSet creates the DaemonSet name and waits until the
// DaemonSet controller has created one pod of it on every node of the lab,
// scheduled there. The test's cleanup deletes the DaemonSet (if the test
// did not) and waits until its pods are gone.
func createUpstreamDaemonSet(t *testing.T, ctx context.Context, name string) *upstreamDaemonSet {
	t.Helper()
	sel := map[string]string{"app.kubernetes.io/name": name}
	fieldEnv := func(name, path string) v1.EnvVar {
		return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}}
	}
	ds, err := client.AppsV1().DaemonSets(lab.CapacityNamespace).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.CapacityNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: v1.PodSpec{
					ServiceAccountName: "csi-node-provisioner",
					// No kubelet confirms that a pod's containers ended: with
					// no grace period the API server removes a pod at once
					// when the garbage collector deletes it, as a kubelet
					// would once its containers stopped.
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []v1.Container{{
						Name:  "csi-provisioner",
						Image: "registry.k8s.io/sig-storage/csi-provisioner:" + controlplane.UpstreamProvisionerVersion,
						Args:  upstreamNodeArgs,
						Env: []v1.EnvVar{fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("NAMESPACE", "metadata.namespace"),
							fieldEnv("POD_NAME", "metadata.name")},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating DaemonSet %s: %v", name, err)
	}
	t.Cleanup(func() { deleteUpstreamDaemonSet(t, context.WithoutCancel(ctx), ds) })
	u := &upstreamDaemonSet{DaemonSet: ds}
	var last string
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		u.pods, last = daemonSetPods(ctx, ds)
		return len(u.pods) == len(nl.Names), nil
	}); err != nil {
		t.Fatalf("pods of DaemonSet %s: %v: %s", name, err, last)
	}
	return u
}

// daemonSetPods returns the names of ds's pods by node when every node of
// the lab has exactly one, scheduled there and controlled by ds; otherwise
// nil and what is missing.
func daemonSetPods(ctx context.Context, ds *appsv1.DaemonSet) (map[string]string, string) {
	pods, err := client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil, err.Error()
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == ds.UID && p.DeletionTimestamp == nil {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		}
	}
	out := map[string]string{}
	var diff []string
	for _, node := range nl.Names {
		if len(byNode[node]) != 1 {
			diff = append(diff, fmt.Sprintf("%s has pods %v", node, byNode[node]))
			continue
		}
		out[node] = byNode[node][0]
	}
	if len(diff) > 0 {
		return nil, fmt.Sprintf("%s (unscheduled: %v)", strings.Join(diff, "; "), byNode[""])
	}
	return out, ""
}

// deleteUpstreamDaemonSet deletes ds with background propagation, as
// kubectl does, and waits until it and its pods (which the garbage
// collector deletes) are gone. A DaemonSet already gone is no error.
func deleteUpstreamDaemonSet(t *testing.T, ctx context.Context, ds *appsv1.DaemonSet) {
	t.Helper()
	err := client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name,
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting DaemonSet %s: %v", ds.Name, err)
		return
	}
	var left string
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if _, err := client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = fmt.Sprintf("DaemonSet still there (%v)", err)
			return false, nil
		}
		pods, err := client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String()})
		if err != nil {
			return false, nil
		}
		left = fmt.Sprintf("%d pods left", len(pods.Items))
		return len(pods.Items) == 0, nil
	}); err != nil {
		t.Errorf("DaemonSet %s and its pods not gone: %v: %s", ds.Name, err, left)
	}
}

// checkCapacityOwnedByDaemonSet waits until every node has exactly one
// capacity object of classWFFC, labelled with upstream's managed-by value
// for the node and owned by ds alone, as its controller: upstream's
// default --capacity-ownerref-level=1 in a DaemonSet. It returns them by
// node.
func checkCapacityOwnedByDaemonSet(t *testing.T, ctx context.Context, ds *appsv1.DaemonSet) map[string]storagev1.CSIStorageCapacity {
	t.Helper()
	got, err := waitForCapacityPerNode(ctx, func(node string, c storagev1.CSIStorageCapacity) string {
		if v := c.Labels[labelManagedBy]; v != capacity.ManagedBy(node) {
			return fmt.Sprintf("%s: %s labelled %s=%q", node, c.Name, labelManagedBy, v)
		}
		owners := c.OwnerReferences
		if len(owners) != 1 || owners[0].APIVersion != "apps/v1" || owners[0].Kind != "DaemonSet" ||
			owners[0].Name != ds.Name || owners[0].UID != ds.UID || !ptr.Deref(owners[0].Controller, false) {
			return fmt.Sprintf("%s: %s owned by %s", node, c.Name, ownersString(owners))
		}
		return ""
	})
	if err != nil {
		t.Fatalf("capacity objects of %s published by upstream, want each owned by DaemonSet %s (%s) as its controller: %v",
			classWFFC, ds.Name, ds.UID, err)
	}
	return got
}

// checkTakenOver fails the test unless each node's capacity object now is
// the one upstream published (same name and UID, updated in place), as
// docs/node-deployment.md promises: ours take over upstream's objects
// rather than delete and recreate them.
func checkTakenOver(t *testing.T, upstream, ours map[string]storagev1.CSIStorageCapacity) {
	t.Helper()
	kept := 0
	for _, node := range nl.Names {
		u, o := upstream[node], ours[node]
		if u.UID != o.UID || u.Name != o.Name {
			t.Errorf("%s: capacity object %s (%s) after the swap, want upstream's %s (%s) taken over", node, o.Name, o.UID, u.Name, u.UID)
			continue
		}
		kept++
	}
	t.Logf("%d of %d capacity objects taken over in place; %s: owners %s, then %s", kept, len(nl.Names),
		upstream[nl.Names[0]].Name, ownersString(upstream[nl.Names[0]].OwnerReferences), ownersString(ours[nl.Names[0]].OwnerReferences))
}

// checkCapacityOutlivesDaemonSet deletes ds, waits until it and its pods
// are gone (the garbage collector acted on its deletion) and then, for
// gcGrace, checks that each node's capacity object is still the one of want
// (same UID): ours removed upstream's DaemonSet owner, so the garbage
// collector has no reason to delete them.
func checkCapacityOutlivesDaemonSet(t *testing.T, ctx context.Context, ds *appsv1.DaemonSet, want map[string]storagev1.CSIStorageCapacity) {
	t.Helper()
	deleteUpstreamDaemonSet(t, ctx, ds)
	const gcGrace = 5 * time.Second
	var diff []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, gcGrace, true, func(ctx context.Context) (bool, error) {
		caps, err := nl.PublishedCapacity(ctx, classWFFC)
		if err != nil {
			return false, nil
		}
		have := map[types.UID]bool{}
		for _, node := range nl.Names {
			for _, c := range caps[node] {
				have[c.UID] = true
			}
		}
		for _, node := range nl.Names {
			if w := want[node]; !have[w.UID] {
				diff = append(diff, fmt.Sprintf("%s: %s (%s) gone, objects now %s", node, w.Name, w.UID, capacityNames(caps[node])))
			}
		}
		return len(diff) > 0, nil
	})
	switch {
	case len(diff) > 0:
		t.Errorf("capacity objects after DaemonSet %s was deleted: %s", ds.Name, strings.Join(diff, "; "))
	case !wait.Interrupted(err):
		t.Errorf("watching the capacity objects after DaemonSet %s was deleted: %v", ds.Name, err)
	}
}

// ownersString lists owner references as "Kind/name uid", with
// " (controller)" for a controller reference.
func ownersString(refs []metav1.OwnerReference) string {
	var out []string
	for _, r := range refs {
		s := fmt.Sprintf("%s/%s %s", r.Kind, r.Name, r.UID)
		if ptr.Deref(r.Controller, false) {
			s += " (controller)"
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// capacityNames lists objects as "name (uid)".
func capacityNames(objs []storagev1.CSIStorageCapacity) string {
	var out []string
	for _, c := range objs {
		out = append(out, fmt.Sprintf("%s (%s)", c.Name, c.UID))
	}
	return "[" + strings.Join(out, ", ") + "]"
}
