// Package e2enode runs csi-provisioner in node deployment end to end (issue
// 14): the local control plane with csi-topology-scheduler (the CSITopology
// plugin with capacity tracking and the driver heartbeat) as its scheduler,
// and six nodes, each with its own node-local mock driver (the node is its
// only segment), csi-node-publisher and `csi-provisioner --node-deployment`
// (test/harness/lab's NodeLocalLab). No central controller nor provisioner runs.
package e2enode

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// schedulerConfig runs the CSITopology plugin in the cluster's only
// scheduler profile, as test/e2eplugin does, with capacity tracking and the
// driver heartbeat (the publishers' Leases in lab.PublisherNamespace) on.
var schedulerConfig = lab.PluginSchedulerConfig(lab.PluginScheduler{
	Args: []string{"capacity: true", "driverHeartbeat: true", "heartbeatNamespace: " + lab.PublisherNamespace},
})

const (
	gi = int64(1) << 30
	// nodes is the lab's size; ttl the publishers' heartbeat Lease duration.
	nodes = 6
	ttl   = 4 * time.Second
	// nodeCapacity is each node's capacity unless a test changes it.
	nodeCapacity = 100 * gi
	// The classes of the node-local driver the tests share.
	classWFFC      = "nodelocal-wffc"
	classImmediate = "nodelocal-immediate"

	timeout = lab.WorkloadTimeout
)

var (
	nl     *lab.NodeLocalLab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	// The DaemonSet controller creates the pods of the DaemonSet upstream's
	// node deployment runs in (runUpstreamNodeDeployment).
	opts := controlplane.Options{SchedulerConfig: schedulerConfig,
		Controllers: slices.Concat(controlplane.DefaultControllers, []string{"daemonset-controller"})}
	os.Exit(controlplane.RunTestMainWithOurSchedulerOptions(m, opts, func(ctx context.Context, c *controlplane.Cluster) error {
		client = c.Client
		var err error
		if nl, err = lab.SetupNodeLocal(ctx, c, lab.NodeLocalConfig{Nodes: nodes, CapacityBytes: nodeCapacity, TTL: ttl,
			LabelSelection: labelSelection()}); err != nil {
			return err
		}
		for name, mode := range map[string]storagev1.VolumeBindingMode{
			classWFFC: storagev1.VolumeBindingWaitForFirstConsumer, classImmediate: storagev1.VolumeBindingImmediate,
		} {
			if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: lab.DriverName, VolumeBindingMode: ptr.To(mode),
				ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete),
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		// Every node publishes its capacity for the WaitForFirstConsumer
		// class before a test schedules a pod.
		return c.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			caps, err := nl.PublishedCapacity(ctx, classWFFC)
			if err != nil {
				return false, nil
			}
			for _, n := range nl.Names {
				if len(caps[n]) != 1 || caps[n][0].Capacity == nil || caps[n][0].Capacity.Value() != nodeCapacity {
					return false, nil
				}
			}
			return true, nil
		})
	}))
}

// selectionEnv chooses how the nodes' provisioners select their claims
// and PVs: "label" (the default: --node-deployment-selection=label with
// csi-node-router) or "all" (every claim and PV, as upstream). Every test
// of the package runs in either; the tests of selection by label switch
// the lab to it when it runs with "all".
const selectionEnv = "CSI_TOPOLOGY_NODE_SELECTION"

func labelSelection() bool { return os.Getenv(selectionEnv) != "all" }

// deleteNamespace is the cleanup of lab.NewNamespaceCleanup for this
// package: it deletes the namespace's StatefulSets and pods (at once: no
// kubelet ends them), then the namespace, and waits until the PVs of its
// claims are gone: each node's provisioner deletes its node's volumes, and
// the next test starts with every node's capacity back.
func deleteNamespace(t *testing.T) func(ctx context.Context, ns string) {
	return func(ctx context.Context, ns string) { deleteNamespaceNow(t, ctx, ns) }
}

func deleteNamespaceNow(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	_ = client.AppsV1().StatefulSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if sets, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(sets.Items) > 0 {
			return false, nil
		}
		_ = client.CoreV1().Pods(ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Errorf("pods of %s not gone: %v", ns, err)
	}
	// The volumes to be deleted, by node (their PVs' node affinity).
	type volume struct{ pv, node, handle string }
	var vols []volume
	if pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns && pv.Spec.CSI != nil {
				if node, err := pvNode(&pv); err == nil {
					vols = append(vols, volume{pv.Name, node, pv.Spec.CSI.VolumeHandle})
				}
			}
		}
	}
	_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	var left []string
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				left = append(left, fmt.Sprintf("%s (%s, claim %s, node %s)", pv.Name, pv.Status.Phase, pv.Spec.ClaimRef.Name, pvNodeOrErr(&pv)))
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Errorf("PVs of the claims of %s not deleted: %v: %s", ns, err, strings.Join(left, ", "))
		return
	}
	// Each node's provisioner deleted its own volumes in its own driver.
	have := map[string]map[string]bool{}
	for _, v := range vols {
		if have[v.node] == nil {
			list, err := nl.Volumes(ctx, v.node)
			if err != nil {
				t.Errorf("volumes of %s: %v", v.node, err)
				continue
			}
			have[v.node] = map[string]bool{}
			for _, dv := range list {
				have[v.node][dv.ID] = true
			}
		}
		if have[v.node][v.handle] {
			t.Errorf("PV %s is gone, its volume %s is still in the driver of %s (leaked)", v.pv, v.handle, v.node)
		}
	}
}

// pvNode returns the node a node-local PV's nodeAffinity names: it must be
// exactly one term with exactly one requirement, kubernetes.io/hostname In
// one node.
func pvNode(pv *v1.PersistentVolume) (string, error) {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) != 1 {
		return "", fmt.Errorf("PV %s: nodeAffinity %+v, want one required term", pv.Name, a)
	}
	term := a.Required.NodeSelectorTerms[0]
	if len(term.MatchFields) != 0 || len(term.MatchExpressions) != 1 {
		return "", fmt.Errorf("PV %s: nodeAffinity term %+v, want one expression", pv.Name, term)
	}
	e := term.MatchExpressions[0]
	if e.Key != v1.LabelHostname || e.Operator != v1.NodeSelectorOpIn || len(e.Values) != 1 {
		return "", fmt.Errorf("PV %s: nodeAffinity %s %s %v, want %s In [one node]", pv.Name, e.Key, e.Operator, e.Values, v1.LabelHostname)
	}
	return e.Values[0], nil
}

func pvNodeOrErr(pv *v1.PersistentVolume) string {
	n, err := pvNode(pv)
	if err != nil {
		return err.Error()
	}
	return n
}

// bound is a claim Bound to its PV.
type bound struct {
	claim *v1.PersistentVolumeClaim
	pv    *v1.PersistentVolume
}

// boundClaims returns the claims of ns that are Bound, with their PVs, by
// name.
func boundClaims(ctx context.Context, ns string) (map[string]bound, error) {
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bound{}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Status.Phase != v1.ClaimBound {
			continue
		}
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out[pvc.Name] = bound{claim: pvc, pv: pv}
	}
	return out, nil
}

// waitAllBound waits until the named claims of ns are all Bound and returns
// them with their PVs.
func waitAllBound(t *testing.T, ctx context.Context, ns string, names []string) map[string]bound {
	t.Helper()
	var got map[string]bound
	start := time.Now()
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = boundClaims(ctx, ns); err != nil {
			return false, nil
		}
		for _, n := range names {
			if _, ok := got[n]; !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("%d of %d claims of %s Bound: %v\n%s", len(got), len(names), ns, err, lab.Describe(ctx, nl.Cluster, ns))
	}
	t.Logf("%d claims Bound in %s", len(names), time.Since(start).Round(100*time.Millisecond))
	return got
}

// callsByVolume indexes the drivers' CreateVolume records: volume name ->
// node -> records.
func callsByVolume(t *testing.T, ctx context.Context) map[string]map[string][]driver.CreateRecord {
	t.Helper()
	all, err := nl.AllCreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]driver.CreateRecord{}
	for node, recs := range all {
		for _, r := range recs {
			if out[r.Name] == nil {
				out[r.Name] = map[string][]driver.CreateRecord{}
			}
			out[r.Name][node] = append(out[r.Name][node], r)
		}
	}
	return out
}

// countBy returns "a:2 b:1" for a map of counts, sorted by key.
func countBy(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// podScheduled returns the pod's PodScheduled condition, nil without one.
func podScheduled(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
