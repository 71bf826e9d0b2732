package e2enode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Mixed rollout from upstream external-provisioner's node deployment, as a
// DaemonSet's rolling update does it: upstream's csi-provisioner runs on
// every node and provisions claims; then csi-node-router starts and ours,
// with selection by label, replace upstream on half the nodes, one node
// after the other, while upstream still runs on the other half. Meanwhile
// new WaitForFirstConsumer claims (their pods on every node) and Immediate
// claims are each Bound to one volume, created on the node of their PV,
// and labelled with it, whichever build provisioned them (ours call
// CreateVolume once; upstream's may ask again for the same volume when the
// router labels the claim meanwhile: see checkCreatedOnceOnNode); old
// claims deleted on either half have their volumes deleted on their node.
// Once ours run everywhere, every remaining claim and PV is labelled, each
// instance's caches are its node's, each node's capacity object is ours,
// and all remaining claims are deleted on their node.
func TestMixedRolloutFromUpstream(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	runUpstreamNodeDeployment(t, ctx, lab.TestObjectName(t, "upstream-"))
	old := append(newWFFCClaimsOn(t, ctx, ns, "up-wffc", nl.Names), newImmediateClaims(t, ctx, ns, "up-imm", 6)...)
	before := waitAllBound(t, ctx, ns, old)
	checkMadeByUpstream(t, ctx, before)

	half := len(nl.Names) / 2
	ours, theirs := nl.Names[:half], nl.Names[half:]
	if err := nl.StartRouter(ctx); err != nil {
		t.Fatal(err)
	}
	rollOutOurs(t, ctx, ours)

	// Mid-rollout: upstream on theirs, ours on ours.
	fresh := append(newWFFCClaimsOn(t, ctx, ns, "mixed-wffc", nl.Names), newImmediateClaims(t, ctx, ns, "mixed-imm", 10)...)
	logRaceWinners(t, waitAllBound(t, ctx, ns, fresh), "mixed-imm", theirs)
	mixed := waitRouterLabelled(t, ctx, ns)
	checkLabelled(t, mixed)
	checkPodsNodes(t, mixed, "mixed-wffc", nl.Names)
	repeatOK := onNodes(mixed, fresh, theirs)
	checkCreatedOnceOnNode(t, ctx, mixed, append(append([]string(nil), old...), fresh...), repeatOK)
	// Old claims of both halves: pinned WFFC ones and the first Immediate
	// ones (wherever their race put them).
	gone := []string{"up-wffc-00", "up-wffc-01", fmt.Sprintf("up-wffc-%02d", half), fmt.Sprintf("up-wffc-%02d", half+1)}
	deletePodsNow(t, ctx, ns, gone)
	gone = append(gone, "up-imm-00", "up-imm-01", "up-imm-02")
	deleteClaimsAndWait(t, ctx, ns, before, gone)
	checkDeletedOnNode(t, ctx, before, gone)

	rollOutOurs(t, ctx, theirs)
	after := waitRouterLabelled(t, ctx, ns)
	checkLabelled(t, after)
	waitCachesScoped(t, ctx)
	checkCapacityOwnedByNodes(t, ctx)
	var rest []string
	for name := range after {
		rest = append(rest, name)
	}
	if want := len(old) + len(fresh) - len(gone); len(rest) != want {
		t.Errorf("%d claims Bound after the rollout, want %d", len(rest), want)
	}
	checkCreatedOnceOnNode(t, ctx, after, rest, repeatOK)
	deletePodsNow(t, ctx, ns, rest)
	deleteClaimsAndWait(t, ctx, ns, after, rest)
	checkDeletedOnNode(t, ctx, after, rest)
}

// logRaceWinners logs how many of the Immediate claims named <prefix>-*
// upstream's instances (on theirs) won, and how many ours did.
func logRaceWinners(t *testing.T, got map[string]bound, prefix string, theirs []string) {
	t.Helper()
	up, ours := 0, 0
	for name, b := range got {
		if !strings.HasPrefix(name, prefix+"-") {
			continue
		}
		if slices.Contains(theirs, pvNodeOrErr(b.pv)) {
			up++
		} else {
			ours++
		}
	}
	t.Logf("Immediate claims %s-*: %d provisioned by upstream's instances, %d by ours", prefix, up, ours)
}

// rollOutOurs replaces upstream's csi-provisioner by ours with selection by
// label on nodes, one node after the other as a DaemonSet's rolling update
// does: each node's upstream instance stops before ours starts there and
// answers /readyz.
func rollOutOurs(t *testing.T, ctx context.Context, nodes []string) {
	t.Helper()
	for _, name := range nodes {
		if err := nl.Node(name).StartProvisioner(ctx, lab.LabelSelectionArg); err != nil {
			t.Fatal(err)
		}
	}
}

// newWFFCClaimsOn creates one claim of classWFFC per node, named
// <prefix>-<index>, each with a pod that uses it and must run on its node
// (node selector kubernetes.io/hostname), and returns their names.
func newWFFCClaimsOn(t *testing.T, ctx context.Context, ns, prefix string, nodes []string) []string {
	t.Helper()
	var names []string
	for i, node := range nodes {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		lab.NewClaim(t, ctx, nl.Cluster, ns, name, classWFFC, gi)
		lab.NewPod(t, ctx, nl.Cluster, ns, name, lab.PodOptions{Claims: []string{name}, NodeSelector: map[string]string{v1.LabelHostname: node}})
		names = append(names, name)
	}
	return names
}

// checkPodsNodes fails the test unless each claim <prefix>-<index> made by
// newWFFCClaimsOn over nodes is Bound on the node its pod must run on.
func checkPodsNodes(t *testing.T, got map[string]bound, prefix string, nodes []string) {
	t.Helper()
	for i, node := range nodes {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		b, ok := got[name]
		if !ok {
			t.Errorf("claim %s not Bound", name)
			continue
		}
		if pvn := pvNodeOrErr(b.pv); pvn != node {
			t.Errorf("claim %s of a pod on %s: its PV on %s", name, node, pvn)
		}
	}
}

// checkCreatedOnceOnNode fails the test unless the volume of each named
// claim was created exactly once over all nodes' drivers, by the driver of
// its PV's node; for the claims of repeatOK (upstream's instance provisioned
// them while csi-node-router labelled the claim), several calls are
// accepted if all are on that node and answered OK with the PV's volume:
// one volume, asked for again by name.
func checkCreatedOnceOnNode(t *testing.T, ctx context.Context, got map[string]bound, names []string, repeatOK map[string]bool) {
	t.Helper()
	calls := callsByVolume(t, ctx)
	for _, name := range names {
		b, ok := got[name]
		if !ok {
			t.Errorf("claim %s not Bound", name)
			continue
		}
		node := pvNodeOrErr(b.pv)
		byNode := calls[lab.VolumeName(b.claim)]
		var seen []string
		total, same := 0, true
		for n, recs := range byNode {
			total += len(recs)
			for _, r := range recs {
				seen = append(seen, fmt.Sprintf("%s#%d %s %s", n, r.Seq, r.Code, r.Result))
				same = same && n == node && r.Code == "OK" && r.Result == b.pv.Spec.CSI.VolumeHandle
			}
		}
		if total == 1 && len(byNode[node]) == 1 || repeatOK[name] && total > 1 && same {
			if total > 1 {
				t.Logf("claim %s: upstream's instance on %s asked again for its volume: %v", name, node, seen)
			}
			continue
		}
		t.Errorf("claim %s (PV on %s, volume %s): CreateVolume calls %v, want one, on %s", name, node, b.pv.Spec.CSI.VolumeHandle, seen, node)
	}
}

// onNodes returns the named claims of got whose PV is on one of nodes.
func onNodes(got map[string]bound, names, nodes []string) map[string]bool {
	out := map[string]bool{}
	for _, name := range names {
		if b, ok := got[name]; ok && slices.Contains(nodes, pvNodeOrErr(b.pv)) {
			out[name] = true
		}
	}
	return out
}

// deletePodsNow deletes the pods of ns named as the claims (those of
// newWFFCClaimsOn and newWFFCClaims) at once: no kubelet ends them. Names
// without a pod are skipped.
func deletePodsNow(t *testing.T, ctx context.Context, ns string, names []string) {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	for _, p := range pods.Items {
		if !want[p.Name] {
			continue
		}
		if err := client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
}
