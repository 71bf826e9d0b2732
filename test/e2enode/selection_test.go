package e2enode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// withLabelSelection switches the lab to selection by label for the test
// when the package runs with CSI_TOPOLOGY_NODE_SELECTION=all, and back at
// its end.
func withLabelSelection(t *testing.T, ctx context.Context) {
	t.Helper()
	if nl.LabelSelection() {
		return
	}
	if err := nl.SetSelection(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nl.SetSelection(context.WithoutCancel(ctx), false); err != nil {
			t.Error(err)
		}
	})
}

// newWFFCClaims creates n claims of classWFFC, each with a pod that uses it
// (the scheduler places them), and returns their names.
func newWFFCClaims(t *testing.T, ctx context.Context, ns, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		lab.NewClaim(t, ctx, nl.Cluster, ns, name, classWFFC, gi)
		lab.NewPod(t, ctx, nl.Cluster, ns, name, lab.PodOptions{Claims: []string{name}})
		names = append(names, name)
	}
	return names
}

func newImmediateClaims(t *testing.T, ctx context.Context, ns, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		lab.NewClaim(t, ctx, nl.Cluster, ns, name, classImmediate, gi)
		names = append(names, name)
	}
	return names
}

// checkLabelled fails the test unless every bound claim and its PV carry
// the label of the claim's selected node, the PV's node.
func checkLabelled(t *testing.T, got map[string]bound) {
	t.Helper()
	for name, b := range got {
		node := b.claim.Annotations[lab.AnnSelectedNode]
		want := nodelabel.NodeValue(node)
		if pvn, err := pvNode(b.pv); err != nil || pvn != node {
			t.Errorf("claim %s selected for %s, its PV on %s (%v)", name, node, pvn, err)
		}
		if v := b.claim.Labels[nodelabel.Key]; v != want {
			t.Errorf("claim %s (node %s): label %s=%q, want %q", name, node, nodelabel.Key, v, want)
		}
		if v := b.pv.Labels[nodelabel.Key]; v != want {
			t.Errorf("PV %s (node %s): label %s=%q, want %q", b.pv.Name, node, nodelabel.Key, v, want)
		}
	}
}

// waitCachesScoped waits until each node's provisioner holds exactly the
// claims labelled with its node or the driver's pool, and the PVs labelled
// with its node (csi_topology_provisioner_cached_*), and fails unless some
// node holds fewer claims than the cluster has: no instance watches them
// all.
func waitCachesScoped(t *testing.T, ctx context.Context) {
	t.Helper()
	pool := nodelabel.PoolValue(lab.DriverName)
	var diff []string
	total := 0
	err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		claims, err := client.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		total, diff = len(claims.Items), diff[:0]
		for _, node := range nl.Names {
			wantClaims, wantPVs := 0, 0
			for _, c := range claims.Items {
				if v := c.Labels[nodelabel.Key]; v == nodelabel.NodeValue(node) || v == pool {
					wantClaims++
				}
			}
			for _, pv := range pvs.Items {
				if pv.Labels[nodelabel.Key] == nodelabel.NodeValue(node) {
					wantPVs++
				}
			}
			m, err := lab.Scrape(ctx, nl.Node(node).HTTPURL+"/metrics")
			if err != nil {
				return false, nil
			}
			gotClaims := int(lab.MetricValue(m, "csi_topology_provisioner_cached_claims", nil))
			gotPVs := int(lab.MetricValue(m, "csi_topology_provisioner_cached_volumes", nil))
			if gotClaims != wantClaims || gotPVs != wantPVs {
				diff = append(diff, fmt.Sprintf("%s holds %d claims and %d PVs, its labels select %d and %d (the cluster has %d claims)",
					node, gotClaims, gotPVs, wantClaims, wantPVs, total))
			}
		}
		return len(diff) == 0, nil
	})
	if err != nil {
		t.Fatalf("instances' caches are not their nodes' selection: %v\n%s", err, strings.Join(diff, "\n"))
	}
}

// deleteClaimsAndWait deletes claims of ns and waits until their PVs are
// gone and their volumes with them from the drivers of their nodes.
func deleteClaimsAndWait(t *testing.T, ctx context.Context, ns string, got map[string]bound, names []string) {
	t.Helper()
	for _, name := range names {
		if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var left []string
	err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, name := range names {
			b := got[name]
			node, _ := pvNode(b.pv)
			if _, err := client.CoreV1().PersistentVolumes().Get(ctx, b.pv.Name, metav1.GetOptions{}); err == nil {
				left = append(left, "PV "+b.pv.Name)
				continue
			}
			vols, err := nl.Volumes(ctx, node)
			if err != nil {
				return false, nil
			}
			for _, v := range vols {
				if v.ID == b.pv.Spec.CSI.VolumeHandle {
					left = append(left, fmt.Sprintf("volume %s on %s", v.ID, node))
				}
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("deleted claims' PVs and volumes not gone: %v: %s", err, strings.Join(left, ", "))
	}
}

// Selection by label end to end, with csi-node-router: a
// WaitForFirstConsumer claim placed as kube-scheduler's VolumeBinding does
// (it writes the selected-node annotation), claims placed by the lab's
// scheduler, and Immediate claims the instances race for are all Bound on
// their node, exactly once, labelled with it; each instance holds only its
// node's claims and PVs and receives no event when other nodes' change;
// deleted claims' volumes are deleted on their node.
func TestSelectionByLabel(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	withLabelSelection(t, ctx)
	manual := "placed-by-annotation"
	lab.NewClaim(t, ctx, nl.Cluster, ns, manual, classWFFC, gi)
	target := nl.Names[1]
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, lab.AnnSelectedNode, target)
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, manual, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wffc := newWFFCClaims(t, ctx, ns, "wffc", 6)
	imm := newImmediateClaims(t, ctx, ns, "imm", 12)
	got := waitAllBound(t, ctx, ns, append(append([]string{manual}, wffc...), imm...))
	if n, _ := pvNode(got[manual].pv); n != target {
		t.Errorf("claim %s selected for %s is Bound on %s", manual, target, n)
	}
	checkLabelled(t, got)
	calls := callsByVolume(t, ctx)
	for name, b := range got {
		total := 0
		for _, recs := range calls[lab.VolumeName(b.claim)] {
			total += len(recs)
		}
		if total != 1 {
			t.Errorf("claim %s: %d CreateVolume calls over all drivers, want 1", name, total)
		}
	}
	waitCachesScoped(t, ctx)
	checkNoOtherNodeEvents(t, ctx, ns, target, got, manual)
	deleteClaimsAndWait(t, ctx, ns, got, imm)
}

// stripNodeLabels removes the node label from the claims of ns and their
// PVs: they are then as a build without the label (today's
// --node-deployment-selection=all, upstream external-provisioner) left
// them.
func stripNodeLabels(t *testing.T, ctx context.Context, ns string, got map[string]bound) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, nodelabel.Key)
	for name, b := range got {
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().PersistentVolumes().Patch(ctx, b.pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// Upgrade from watching everything to selection by label: claims and PVs
// provisioned by instances with --node-deployment-selection=all and no
// label (as today's build and upstream leave them) get their node's label
// from csi-node-router once the instances restart with selection by label;
// their volumes are then deleted on their node, and new claims provision.
// TestUpgradeFromUpstreamNodeDeployment does the same from upstream's
// node deployment.
func TestUpgradeToLabelSelection(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	if err := nl.SetSelection(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nl.SetSelection(context.WithoutCancel(ctx), labelSelection()); err != nil {
			t.Error(err)
		}
	})
	old := append(newWFFCClaims(t, ctx, ns, "old-wffc", 6), newImmediateClaims(t, ctx, ns, "old-imm", 6)...)
	before := waitAllBound(t, ctx, ns, old)
	stripNodeLabels(t, ctx, ns, before)

	if err := nl.SetSelection(ctx, true); err != nil {
		t.Fatal(err)
	}
	checkUpgradedToLabels(t, ctx, ns, []string{"old-imm-00", "old-imm-01", "old-imm-02"}, []string{"old-wffc-00", "old-wffc-01"})
}

// waitRouterLabelled waits until every bound claim of ns and its PV carry
// the label of the claim's selected node (csi-node-router labels what was
// made before the label existed) and returns them.
func waitRouterLabelled(t *testing.T, ctx context.Context, ns string) map[string]bound {
	t.Helper()
	var after map[string]bound
	var missing []string
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		if after, err = boundClaims(ctx, ns); err != nil {
			return false, nil
		}
		missing = missing[:0]
		for name, b := range after {
			want := nodelabel.NodeValue(b.claim.Annotations[lab.AnnSelectedNode])
			if b.claim.Labels[nodelabel.Key] != want || b.pv.Labels[nodelabel.Key] != want {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	}); err != nil {
		t.Fatalf("bound claims and PVs of %s not labelled with their node: %v: %v", ns, err, missing)
	}
	return after
}

// checkUpgradedToLabels checks a node deployment just switched to selection
// by label (the instances and csi-node-router running) over claims of ns
// made before without the label: they and their PVs get their node's
// label, each instance's caches become its node's selection, deleting the
// old claims imm (no pod) and wffc (their pods deleted first, at once)
// deletes their volumes on their node, and new claims provision, labelled.
// It returns the old claims as they were once labelled.
func checkUpgradedToLabels(t *testing.T, ctx context.Context, ns string, imm, wffc []string) map[string]bound {
	t.Helper()
	after := waitRouterLabelled(t, ctx, ns)
	checkLabelled(t, after)
	waitCachesScoped(t, ctx)
	deleteClaimsAndWait(t, ctx, ns, after, imm)
	for _, name := range wffc {
		if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	deleteClaimsAndWait(t, ctx, ns, after, wffc)
	checkDeletedOnNode(t, ctx, after, append(append([]string(nil), imm...), wffc...))
	fresh := append(newWFFCClaims(t, ctx, ns, "new-wffc", 4), newImmediateClaims(t, ctx, ns, "new-imm", 4)...)
	checkLabelled(t, waitAllBound(t, ctx, ns, fresh))
	return after
}

// checkDeletedOnNode fails the test unless the driver of each named claim's
// node (its PV's) answered a DeleteVolume of the claim's volume with OK.
// (Volume IDs are per driver, so another node's DeleteVolume of the same
// ID may be of another volume: only the owner's calls are checked.)
func checkDeletedOnNode(t *testing.T, ctx context.Context, got map[string]bound, names []string) {
	t.Helper()
	calls := map[string][]driver.CallRecord{}
	for _, node := range nl.Names {
		recs, err := nl.Calls(ctx, node, "DeleteVolume")
		if err != nil {
			t.Fatal(err)
		}
		calls[node] = recs
	}
	for _, name := range names {
		b := got[name]
		node, err := pvNode(b.pv)
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.ContainsFunc(calls[node], func(r driver.CallRecord) bool {
			return r.VolumeID == b.pv.Spec.CSI.VolumeHandle && r.Code == "OK"
		}) {
			t.Errorf("claim %s: the driver of %s answered no DeleteVolume of its volume %s with OK", name, node, b.pv.Spec.CSI.VolumeHandle)
		}
	}
}

// csi-node-router killed with SIGKILL right after a burst of claims: the
// volumes provisioned before stay Bound and one of them is deleted on its
// node while no router runs; the claims of the burst provision once a
// router is back (after the dead one's Lease expired), each exactly once.
func TestRouterKilledMidBurst(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	withLabelSelection(t, ctx)
	t.Cleanup(func() {
		if nl.Router() == nil {
			if err := nl.StartRouter(context.WithoutCancel(ctx)); err != nil {
				t.Error(err)
			}
		}
	})
	early := newImmediateClaims(t, ctx, ns, "early", 3)
	pre := waitAllBound(t, ctx, ns, early)
	burst := append(newWFFCClaims(t, ctx, ns, "burst-wffc", 10), newImmediateClaims(t, ctx, ns, "burst-imm", 6)...)
	nl.KillRouter()
	// Provisioned before: unaffected, and deleted on its node.
	deleteClaimsAndWait(t, ctx, ns, pre, early[:1])
	still, err := boundClaims(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range early[1:] {
		if b, ok := still[name]; !ok || b.pv.Name != pre[name].pv.Name {
			t.Errorf("claim %s provisioned before the router died is no longer Bound to %s", name, pre[name].pv.Name)
		}
	}
	if err := nl.StartRouter(ctx); err != nil {
		t.Fatal(err)
	}
	got := waitAllBound(t, ctx, ns, append(burst, early[1:]...))
	checkLabelled(t, got)
	calls := callsByVolume(t, ctx)
	for _, name := range burst {
		total := 0
		for _, recs := range calls[lab.VolumeName(got[name].claim)] {
			total += len(recs)
		}
		if total != 1 {
			t.Errorf("claim %s: %d CreateVolume calls over all drivers, want 1", name, total)
		}
	}
}
