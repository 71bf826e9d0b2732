package e2enode

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// upstreamNodeArgs are the flags of upstream external-provisioner's
// instance on each node, all upstream's own: node deployment with
// Immediate claims raced for (its default) with the short race delays ours
// run with here, and capacity tracking polled every 3 s, as a node-local
// driver's DaemonSet runs it, with upstream's default
// --capacity-ownerref-level (1: the capacity objects are owned by the
// controller of the pod POD_NAME names, the DaemonSet).
var upstreamNodeArgs = []string{
	"--node-deployment", "--node-deployment-immediate-binding=true",
	"--node-deployment-base-delay=200ms", "--node-deployment-max-delay=2s",
	"--enable-capacity", "--capacity-poll-interval=3s",
}

// pvFinalizer is the deletion-protection finalizer upstream's library puts
// on the PVs it creates.
const pvFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"

// Upgrade from upstream external-provisioner's node deployment: upstream's
// csi-provisioner (controlplane.UpstreamProvisionerVersion, built from its
// module) runs on every node with --node-deployment and provisions
// WaitForFirstConsumer and Immediate claims, leaving them and their PVs
// without the node label; then upstream stops and ours start with
// selection by label beside csi-node-router. The router labels upstream's
// claims and PVs with their node, each instance's caches hold only its
// node's, deleting upstream's claims deletes their volumes on their node
// (the PVs' finalizer removed), no volume of upstream's is created again,
// new claims provision, and ours take over each node's capacity object
// upstream published, owned by upstream's DaemonSet: the same object, now
// owned by the node's Node alone, which stays when the DaemonSet is
// deleted.
func TestUpgradeFromUpstreamNodeDeployment(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	ds, upstreamCaps := runUpstreamNodeDeployment(t, ctx, lab.TestObjectName(t, "upstream-"))
	old := append(newWFFCClaims(t, ctx, ns, "up-wffc", 6), newImmediateClaims(t, ctx, ns, "up-imm", 6)...)
	before := waitAllBound(t, ctx, ns, old)
	checkMadeByUpstream(t, ctx, before)

	for _, name := range nl.Names {
		nl.Node(name).StopProvisioner()
	}
	if err := nl.SetSelection(ctx, true); err != nil {
		t.Fatal(err)
	}
	after := checkUpgradedToLabels(t, ctx, ns, []string{"up-imm-00", "up-imm-01", "up-imm-02"}, []string{"up-wffc-00", "up-wffc-01"})
	calls := callsByVolume(t, ctx)
	for name, b := range after {
		if n := len(calls[lab.VolumeName(b.claim)][pvNodeOrErr(b.pv)]); n != 1 {
			t.Errorf("claim %s provisioned by upstream: %d CreateVolume calls after the upgrade, want still 1", name, n)
		}
	}
	oursCaps := checkCapacityOwnedByNodes(t, ctx)
	checkTakenOver(t, upstreamCaps, oursCaps)
	checkCapacityOutlivesDaemonSet(t, ctx, ds.DaemonSet, oursCaps)
}

// runUpstreamNodeDeployment replaces the lab's node deployment with
// upstream's, as if upstream's had run from the start: it creates the
// DaemonSet dsName (createUpstreamDaemonSet), stops csi-node-router and
// every node's instance of ours, deletes the capacity objects ours
// published, and starts upstream's csi-provisioner on every node with
// upstreamNodeArgs and POD_NAME naming the DaemonSet's pod on the node,
// against the node's driver, under the lab's ServiceAccount
// csi-node-provisioner (deploy/'s node-deployment rules, which cover
// upstream's needs, its owner lookup included). It returns once each
// serves its metrics and every node has its capacity object, owned by the
// DaemonSet (checkCapacityOwnedByDaemonSet), with those objects by node.
// The test's cleanup puts the package's own setup back.
func runUpstreamNodeDeployment(t *testing.T, ctx context.Context, dsName string) (*upstreamDaemonSet, map[string]storagev1.CSIStorageCapacity) {
	t.Helper()
	up, err := controlplane.BuildUpstream(ctx, nl.Cluster.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nl.SetSelection(context.WithoutCancel(ctx), labelSelection()); err != nil {
			t.Error(err)
		}
	})
	ds := createUpstreamDaemonSet(t, ctx, dsName)
	nl.StopRouter()
	for _, name := range nl.Names {
		nl.Node(name).StopProvisioner()
	}
	if err := client.StorageV1().CSIStorageCapacities(lab.CapacityNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "csi.storage.k8s.io/drivername=" + lab.DriverName}); err != nil {
		t.Fatalf("deleting the capacity objects of ours: %v", err)
	}
	for _, name := range nl.Names {
		n := nl.Node(name)
		args := append([]string{"--http-endpoint=" + strings.TrimPrefix(n.HTTPURL, "http://")}, upstreamNodeArgs...)
		if err := n.StartProvisionerBinaryEnv("upstream-csi-provisioner", up.Provisioner, []string{"POD_NAME=" + ds.pods[name]}, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range nl.Names {
		n := nl.Node(name)
		if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			if p := n.Provisioner(); p.Exited() {
				return false, fmt.Errorf("upstream csi-provisioner of %s exited: %v; the end of %s:\n%s", name, p.Wait(), p.LogPath(), p.LogTail(10))
			}
			return lab.HTTPStatus(ctx, n.HTTPURL+"/metrics") == http.StatusOK, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ds, checkCapacityOwnedByDaemonSet(t, ctx, ds.DaemonSet)
}

// checkMadeByUpstream fails the test unless upstream, not ours, made the
// claims' volumes: upstream's running instances counted them in their
// controller_persistentvolumeclaim_provision_total, neither a claim nor
// its PV has the node label (ours write it in either selection mode), the
// PV has upstream's finalizer, and the claim's volume was created exactly
// once, in the driver of its PV's node.
func checkMadeByUpstream(t *testing.T, ctx context.Context, got map[string]bound) {
	t.Helper()
	provisioned := 0.0
	for _, name := range nl.Names {
		m, err := lab.Scrape(ctx, nl.Node(name).HTTPURL+"/metrics")
		if err != nil {
			t.Fatalf("metrics of upstream's instance on %s: %v", name, err)
		}
		provisioned += lab.MetricValue(m, "controller_persistentvolumeclaim_provision_total", nil)
	}
	if int(provisioned) != len(got) {
		t.Errorf("upstream's instances provisioned %v claims, want %d", provisioned, len(got))
	}
	calls := callsByVolume(t, ctx)
	for name, b := range got {
		if v, ok := b.claim.Labels[nodelabel.Key]; ok {
			t.Errorf("claim %s provisioned by upstream has the label %s=%q", name, nodelabel.Key, v)
		}
		if v, ok := b.pv.Labels[nodelabel.Key]; ok {
			t.Errorf("PV %s provisioned by upstream has the label %s=%q", b.pv.Name, nodelabel.Key, v)
		}
		if !slices.Contains(b.pv.Finalizers, pvFinalizer) {
			t.Errorf("PV %s provisioned by upstream: finalizers %v, want %s", b.pv.Name, b.pv.Finalizers, pvFinalizer)
		}
		node, err := pvNode(b.pv)
		if err != nil {
			t.Error(err)
			continue
		}
		byNode := calls[lab.VolumeName(b.claim)]
		total := 0
		for _, recs := range byNode {
			total += len(recs)
		}
		if total != 1 || len(byNode[node]) != 1 {
			t.Errorf("claim %s (PV on %s): CreateVolume calls by node %v, want one, on %s", name, node, byNode, node)
		}
	}
}

// checkCapacityOwnedByNodes waits until every node has exactly one
// capacity object of classWFFC, owned by the node's Node alone (no
// DaemonSet reference left), as ours publish them: ours took over what
// upstream's instances published. It returns them by node.
func checkCapacityOwnedByNodes(t *testing.T, ctx context.Context) map[string]storagev1.CSIStorageCapacity {
	t.Helper()
	got, err := waitForCapacityPerNode(ctx, func(node string, c storagev1.CSIStorageCapacity) string {
		if owners := c.OwnerReferences; len(owners) != 1 || owners[0].Kind != "Node" || owners[0].Name != node {
			return fmt.Sprintf("%s: %s owned by %s", node, c.Name, ownersString(owners))
		}
		return ""
	})
	if err != nil {
		t.Errorf("capacity objects of %s after the upgrade: %v", classWFFC, err)
	}
	return got
}

// waitForCapacityPerNode waits until every node of the lab has exactly one
// capacity object of classWFFC and problem finds nothing wrong with any of
// them ("" for none). It returns them by node, or an error that names
// what was still wrong at the timeout.
func waitForCapacityPerNode(ctx context.Context, problem func(node string, c storagev1.CSIStorageCapacity) string) (map[string]storagev1.CSIStorageCapacity, error) {
	var diff []string
	var got map[string]storagev1.CSIStorageCapacity
	err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		caps, err := nl.PublishedCapacity(ctx, classWFFC)
		if err != nil {
			return false, nil
		}
		diff, got = diff[:0], map[string]storagev1.CSIStorageCapacity{}
		for _, node := range nl.Names {
			if len(caps[node]) != 1 {
				diff = append(diff, fmt.Sprintf("%s has %d objects", node, len(caps[node])))
				continue
			}
			got[node] = caps[node][0]
			if p := problem(node, caps[node][0]); p != "" {
				diff = append(diff, p)
			}
		}
		return len(diff) == 0, nil
	})
	if err != nil {
		return got, fmt.Errorf("%w: %s", err, strings.Join(diff, "; "))
	}
	return got, nil
}
