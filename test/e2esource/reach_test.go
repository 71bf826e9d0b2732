package e2esource

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// The lab's mock driver has regional snapshots (--regional-snapshots), as
// the clouds' zonal disks do: a snapshot of a volume of z1 restores into
// any zone.

// podInZone creates a pod that uses claim and requires a node of zone.
func podInZone(t *testing.T, ctx context.Context, ns, name, claim, zone string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		NodeSelector: map[string]string{lab.ZoneKey: zone},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// requisiteZones is the zones of the requisite topology of the mock's
// CreateVolume for the claim.
func requisiteZones(t *testing.T, ctx context.Context, claim *v1.PersistentVolumeClaim) []string {
	t.Helper()
	reqs, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var zones []string
	for _, r := range reqs {
		if r.Name != lab.VolumeName(claim) {
			continue
		}
		var req struct {
			AccessibilityRequirements struct {
				Requisite []struct {
					Segments map[string]string `json:"segments"`
				} `json:"requisite"`
			} `json:"accessibilityRequirements"`
		}
		if err := json.Unmarshal(r.Request, &req); err != nil {
			t.Fatal(err)
		}
		zones = zones[:0]
		for _, s := range req.AccessibilityRequirements.Requisite {
			zones = append(zones, s.Segments[lab.ZoneKey])
		}
	}
	return zones
}

// A WaitForFirstConsumer restore whose pod must run in z2, of a snapshot of
// a volume of z1, is made in z2 from the snapshot, at the first attempt, as
// upstream external-provisioner does (the claim used to be handed back on
// every attempt, while the stock scheduler kept choosing z2).
func TestWFFCRestoreInAnotherZone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	src := source(t, ctx, ns, 1<<30)
	if err := env.Snapshot(ctx, env.ControllerSocket(), ns, "snap", "src", src); err != nil {
		t.Fatal(err)
	}
	lab.NewClaim(t, ctx, env.Cluster, ns, "restore", ns, 1<<30, restoreOf("snap"))
	podInZone(t, ctx, ns, "restore", "restore", "z2")
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "restore")
	if z := zoneOf(pv); z != "z2" {
		t.Errorf("restored volume in zone %q, want the pod's z2", z)
	}
	content, err := snaps.SnapshotV1().VolumeSnapshotContents().Get(ctx, lab.SnapshotContentName(ns, "snap"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vol := volume(t, ctx, pv.Spec.CSI.VolumeHandle); vol.ContentSource == nil || vol.ContentSource.SnapshotID != *content.Status.SnapshotHandle {
		t.Errorf("restored volume made from %+v, want snapshot %s", vol.ContentSource, *content.Status.SnapshotHandle)
	}
	if events := lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "restore"); strings.Contains(events, "SourceUnreachable") {
		t.Errorf("the restore was handed back for its source's zone:\n%s", events)
	}
}

// An Immediate restore into a class whose allowedTopologies exclude the
// source volume's zone is made in an allowed zone (it used to fail with
// "data source unreachable").
func TestImmediateRestoreOutsideSourceZone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	src := source(t, ctx, ns, 1<<30)
	if err := env.Snapshot(ctx, env.ControllerSocket(), ns, "snap", "src", src); err != nil {
		t.Fatal(err)
	}
	z2 := lab.NewClass(t, ctx, env.Cluster, ns+"-z2", lab.ClassOptions{Immediate: true, Zones: []string{"z2"}})
	lab.NewClaim(t, ctx, env.Cluster, ns, "restore", z2, 1<<30, restoreOf("snap"))
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "restore")
	if z := zoneOf(pv); z != "z2" {
		t.Errorf("restored volume in zone %q, want z2, the class's only zone", z)
	}
}

// nodeBoundSource binds claim "local-src" to a pre-provisioned PV of the
// driver reachable from node-z1-a only (zone z1 and kubernetes.io/hostname,
// as node-local storage's PVs are), on the volume of src, and returns it.
func nodeBoundSource(t *testing.T, ctx context.Context, ns string, src *v1.PersistentVolume) *v1.PersistentVolume {
	t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-local"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(1<<30, resource.BinarySI)},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: src.Spec.CSI.DeepCopy()},
			ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: "local-src"},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{
					{Key: lab.ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}},
					{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-z1-a"}},
				}}}}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.WithoutCancel(ctx), pv.Name, metav1.DeleteOptions{})
	})
	lab.NewClaim(t, ctx, env.Cluster, ns, "local-src", "", 1<<30, func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeName = pv.Name })
	return lab.WaitBound(t, ctx, env.Cluster, ns, "local-src")
}

// A restore of a snapshot of a node-bound volume (node-local storage) is
// still made where that volume is: an Immediate restore is asked for in
// the source's zone only, and a WaitForFirstConsumer restore whose pod must
// run in z2 is handed back, with an Event that says why.
func TestNodeBoundRestoreStaysNearItsSource(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	local := nodeBoundSource(t, ctx, ns, source(t, ctx, ns, 1<<30))
	if err := env.Snapshot(ctx, env.ControllerSocket(), ns, "snap", "local-src", local); err != nil {
		t.Fatal(err)
	}
	anyZone := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	restore := lab.NewClaim(t, ctx, env.Cluster, ns, "restore", anyZone, 1<<30, restoreOf("snap"))
	if z := zoneOf(lab.WaitBound(t, ctx, env.Cluster, ns, "restore")); z != "z1" {
		t.Errorf("restored volume in zone %q, want the source's z1", z)
	}
	if zones := requisiteZones(t, ctx, restore); len(zones) != 1 || zones[0] != "z1" {
		t.Errorf("CreateVolume requisite zones %v, want [z1] only", zones)
	}
	lab.NewClaim(t, ctx, env.Cluster, ns, "elsewhere", ns, 1<<30, restoreOf("snap"))
	podInZone(t, ctx, ns, "elsewhere", "elsewhere", "z2")
	ev := lab.WaitEvent(t, ctx, env.Cluster, ns, "elsewhere", "Warning ProvisioningFailed", "SourceUnreachable",
		`cannot reach the data source VolumeSnapshot "`+ns+`/snap"`, "node-bound volume")
	t.Logf("Event: %s", ev)
}
