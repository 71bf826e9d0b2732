package e2erecord

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// holdPVCreate revokes csi-provisioner's right to create PVs until the test
// ends (and makes sure a provisioner runs afterwards).
func holdPVCreate(t *testing.T, ctx context.Context) {
	t.Helper()
	setPVCreate(t, ctx, false)
	t.Cleanup(func() {
		setPVCreate(t, context.WithoutCancel(ctx), true)
		if p := env.Provisioner(); p == nil || p.Exited() {
			if err := env.StartProvisioner(); err != nil {
				t.Errorf("restarting csi-provisioner: %v", err)
			}
		}
	})
}

// deleteClaim deletes a claim and returns at once.
func deleteClaim(t *testing.T, ctx context.Context, pvc *v1.PersistentVolumeClaim) {
	t.Helper()
	if err := client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitClaimGone fails the test if the claim stays (Terminating).
func waitClaimGone(t *testing.T, ctx context.Context, pvc *v1.PersistentVolumeClaim) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && c.UID != pvc.UID) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Fatalf("claim %s/%s stays: %s: %v", pvc.Namespace, pvc.Name, claimState(ctx, pvc), err)
	}
}

// claimState describes a claim for the log: gone, or its finalizers.
func claimState(ctx context.Context, pvc *v1.PersistentVolumeClaim) string {
	c, err := client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("deleting %t, finalizers %v", c.DeletionTimestamp != nil, c.Finalizers)
}

// wantEvent checks, with the record on, that the namespace has an Event of
// reason.
func wantEvent(t *testing.T, ctx context.Context, ns, reason string) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		return slices.Contains(eventReasons(t, ctx, ns), reason), nil
	}); err != nil {
		t.Errorf("no %s Event in %s: %v (have %v)", reason, ns, err, eventReasons(t, ctx, ns))
	}
}

// TestUpstream486KillBetweenCreateVolumeAndPV: csi-provisioner is killed
// (SIGKILL) after CreateVolume returned and before the PV exists, and the
// claim is deleted while no provisioner runs. The restarted provisioner must
// delete the volume: nothing else remembers it (upstream
// kubernetes-csi/external-provisioner#486).
//
// The window between CreateVolume and the PV is held open by revoking the
// provisioner's right to create PVs: the library then retries the PV create
// in memory, where a kill loses it.
func TestUpstream486KillBetweenCreateVolumeAndPV(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "rec-")
	class := lab.NewClass(t, ctx, env.Cluster, "rec-486", lab.ClassOptions{Immediate: true})
	holdPVCreate(t, ctx)
	pvc := lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, 1<<30)
	name := lab.VolumeName(pvc)
	vol := waitVolume(t, ctx, name)
	lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "Failed to save volume", "pvc-"+string(pvc.UID))

	env.KillProvisioner()
	deleteClaim(t, ctx, pvc)
	// Give the claim time to go if nothing holds it.
	time.Sleep(2 * time.Second)
	t.Logf("volume %s (%s) exists; provisioner killed; claim deleted: %s", name, vol.ID, claimState(ctx, pvc))

	setPVCreate(t, ctx, true)
	if err := env.StartProvisioner(); err != nil {
		t.Fatal(err)
	}
	waitNoLeak(t, ctx, name)
	waitClaimGone(t, ctx, pvc)
	wantEvent(t, ctx, ns, inflight.ReasonInFlightVolumeDeleted)
}

// TestUpstream1469PVNameTaken: while CreateVolume runs, a PV of the claim's
// deterministic name appears for another volume (upstream's race: the
// claim's earlier PV, being deleted after its volume was); the PV create of
// the new volume then returns AlreadyExists, which the provisioning library
// takes for success. The new volume must not stay without a PV (upstream
// kubernetes-csi/external-provisioner#1469).
func TestUpstream1469PVNameTaken(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "rec-")
	class := lab.NewClass(t, ctx, env.Cluster, "rec-1469", lab.ClassOptions{Immediate: true})
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(4 * time.Second), Count: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	pvc := lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, 1<<30)
	name := lab.VolumeName(pvc)
	// The driver logs the request before the fault's delay.
	lab.WaitLogged(t, ctx, env.Cluster, env.ControllerLogPath(), "CSI request", "CreateVolume", name)

	taken := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID), Finalizers: []string{"e2erecord.example.com/hold"}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              "rec-1469-earlier",
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: "vol-deleted-earlier"}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = client.CoreV1().PersistentVolumes().Patch(ctx, taken.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = client.CoreV1().PersistentVolumes().Delete(ctx, taken.Name, metav1.DeleteOptions{})
	})
	if err := client.CoreV1().PersistentVolumes().Delete(ctx, taken.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	id := waitCreated(t, ctx, name)
	t.Logf("volume %s (%s) created while PV %s (volume %s) is being deleted", name, id, taken.Name, taken.Spec.CSI.VolumeHandle)
	waitNoLeak(t, ctx, name)
	wantEvent(t, ctx, ns, inflight.ReasonVolumeNameTaken)
}

// TestUpstream1437CSINodeDeletedDuringProvisioning: the selected node's
// CSINode entry is deleted (its driver uninstalled) while a volume made for
// it waits for its PV, and csi-provisioner restarts. The restarted
// provisioner finds the node without the driver and hands the claim back to
// the scheduler, with no memory of the volume; the pod's owner then gives up
// on it and deletes pod and claim. The volume must be deleted (upstream
// kubernetes-csi/external-provisioner#1437 and
// sig-storage-lib-external-provisioner#152: rescheduling forgets the volume
// of an earlier attempt).
func TestUpstream1437CSINodeDeletedDuringProvisioning(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "rec-")
	class := lab.NewClass(t, ctx, env.Cluster, "rec-1437", lab.ClassOptions{})
	node := "node-z1-a"
	holdPVCreate(t, ctx)
	pvc := lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, 1<<30)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}},
		Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := lab.VolumeName(pvc)
	vol := waitVolume(t, ctx, name)
	lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "Failed to save volume", "pvc-"+string(pvc.UID))

	// The node's driver goes away while the volume waits for its PV.
	env.StopPublisher(node)
	t.Cleanup(func() {
		if err := env.StartPublisher(context.WithoutCancel(ctx), node); err != nil {
			t.Errorf("restoring the CSINode of %s: %v", node, err)
		}
	})
	if err := client.StorageV1().CSINodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.KillProvisioner()
	setPVCreate(t, ctx, true)
	if err := env.StartProvisioner(); err != nil {
		t.Fatal(err)
	}
	lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "Returning claim to the scheduler", ns+"/"+pvc.Name)
	t.Logf("volume %s (%s) made for %s; CSINode deleted; claim handed back to the scheduler", name, vol.ID, node)

	if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, ctx, pvc)
	waitNoLeak(t, ctx, name)
	waitClaimGone(t, ctx, pvc)
	wantEvent(t, ctx, ns, inflight.ReasonInFlightVolumeDeleted)
}
