package e2eextender

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// The extender and the provisioner started before the VolumeSnapshot CRDs
// were installed. Once they are, a claim restoring a snapshot of a volume
// of zone z1, used by a pod that prefers z2, is selected for a z1 node the
// first time: the extender picked the API up without a restart. (The class
// keeps copies near their source: a restore of a zonal volume is otherwise
// made anywhere, and the snapshot would not matter.)
func TestExtenderSnapshotCRDsInstalledLate(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	patch := []byte(`{"metadata":{"annotations":{"` + topology.AnnCopyPlacement + `":"source"}}}`)
	if _, err := client.StorageV1().StorageClasses().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.InstallSnapshotCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	env.ClaimAndPodPreferring(t, ctx, ns, ns, "src", 1<<30, lab.ZoneKey, "z1", func(p *v1.Pod) {
		p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: lab.ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}}}}}}
	})
	if _, zone := env.WaitPlaced(t, ctx, ns, "src"); zone != "z1" {
		t.Fatalf("source volume in zone %q, want z1", zone)
	}
	src, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, src.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Snapshot(ctx, env.ControllerSocket(), ns, "snap", "src", pv); err != nil {
		t.Fatal(err)
	}
	ref := v1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "restore"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(ns), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:     v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(1<<30, resource.BinarySI)}},
			DataSource:    &ref,
			DataSourceRef: &v1.TypedObjectReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.PodPreferring(t, ctx, ns, "restore", lab.ZoneKey, "z2")
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, n := range []string{"restore", "src"} {
			_ = client.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{})
			_ = client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	node := env.WaitSelectedNode(t, ctx, ns, "restore")
	if zone := env.Nodes[node]; zone != "z1" {
		t.Errorf("restore claim selected for %s in zone %q, want a node of z1 (the snapshot's source volume's zone)", node, zone)
	}
}
