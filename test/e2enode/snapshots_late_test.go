package e2enode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The VolumeSnapshot CRDs are an add-on, often installed after the CSI
// driver and the scheduler. Every component of this package started without
// them: csi-topology-scheduler (the CSITopology plugin), each node's
// csi-provisioner --node-deployment and csi-node-publisher. The CRDs are
// installed now, node-2's volume is snapshotted, and a claim restoring that
// snapshot, used by a pod that prefers node-3, is selected for node-2 the
// first time: the scheduler and node-2's provisioner picked the API up
// without a restart, no instance handed the claim back, and no provisioning
// attempt failed. The scheduler says once in its log that the API is served
// now.
func TestSnapshotCRDsInstalledLate(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	if err := nl.Cluster.InstallSnapshotCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	requireNode2 := func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-2"}}}}}}}}
	}
	nl.ClaimAndPodPreferring(t, ctx, ns, classWFFC, "src", gi, "", "", requireNode2)
	src := waitAllBound(t, ctx, ns, []string{"src"})["src"]
	if n := pvNodeOrErr(src.pv); n != "node-2" {
		t.Fatalf("source volume on %s, want node-2", n)
	}
	if err := nl.Snapshot(ctx, nl.Node("node-2").Socket(), ns, "snap", "src", src.pv); err != nil {
		t.Fatal(err)
	}

	restore := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "restore"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(classWFFC), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:     src.claim.Spec.Resources,
			DataSourceRef: &v1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"},
			DataSource:    &v1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, restore, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nl.PodPreferring(t, ctx, ns, "restore", v1.LabelHostname, "node-3")
	got := waitAllBound(t, ctx, ns, []string{"restore"})["restore"]
	if n := pvNodeOrErr(got.pv); n != "node-2" {
		t.Errorf("restored volume on %s, want node-2 (the snapshot's source volume's node)", n)
	}
	if n := lab.WaitPodNode(t, ctx, nl.Cluster, ns, "restore"); n != "node-2" {
		t.Errorf("pod on %s, want node-2", n)
	}
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=restore"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "ProvisioningFailed" || strings.Contains(e.Message, "pick another node") {
			t.Errorf("the restore was not provisioned on the first try: %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	logs, err := filepath.Glob(filepath.Join(nl.Cluster.LogDir, "kube-scheduler*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no scheduler log in %s: %v", nl.Cluster.LogDir, err)
	}
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), `"Optional API served now: picked up without a restart" api="VolumeSnapshots`); n != 1 {
			t.Errorf("%s says %d times that VolumeSnapshots are served now, want once", path, n)
		}
	}
}
