package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pvFinalizer is upstream external-provisioner's PV deletion-protection
// finalizer.
const pvFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"

// staticClaim creates a PV of driver made by hand (no provisioned-by
// annotation) with the given reclaim policy, pre-bound to a claim of the
// same name in ns, and that claim.
func staticClaim(t *testing.T, ctx context.Context, ns, name, driver string, reclaim v1.PersistentVolumeReclaimPolicy) string {
	t.Helper()
	pvName := ns + "-" + name
	q := resource.MustParse("1Gi")
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: q},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: reclaim,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "static-" + pvName}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.WithoutCancel(ctx), pvName, metav1.DeleteOptions{})
	})
	noClass := ""
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &noClass, VolumeName: pvName,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pvName
}

func waitPVGone(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("PV %s not deleted: %v; events: %s", name, err, lab.EventsOf(ctx, env.Cluster, metav1.NamespaceDefault, "PersistentVolume", name))
	}
}

// Static PVs: a PV of the driver made by hand, bound
// and with reclaim policy Delete, gets upstream's deletion-protection
// finalizer like a provisioned one; released, it is deleted by the
// provisioner (the driver not knowing its handle counts as deleted) and the
// finalizer goes with it. A Retain PV of the driver and a PV of another
// driver get no finalizer.
func TestStaticPVFinalizer(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	deletePV := staticClaim(t, ctx, ns, "delete", driverName, v1.PersistentVolumeReclaimDelete)
	retainPV := staticClaim(t, ctx, ns, "retain", driverName, v1.PersistentVolumeReclaimRetain)
	otherPV := staticClaim(t, ctx, ns, "other", "other.example.com", v1.PersistentVolumeReclaimDelete)
	for _, c := range []string{"delete", "retain", "other"} {
		lab.WaitBound(t, ctx, env.Cluster, ns, c)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, deletePV, metav1.GetOptions{})
		return err == nil && slices.Contains(pv.Finalizers, pvFinalizer), nil
	}); err != nil {
		t.Fatalf("static PV %s of the driver never got %s: %v", deletePV, pvFinalizer, err)
	}
	for _, name := range []string{retainPV, otherPV} {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(pv.Finalizers, pvFinalizer) {
			t.Errorf("PV %s (reclaim %s, driver %s) got %s", name, pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.CSI.Driver, pvFinalizer)
		}
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "delete", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPVGone(t, ctx, deletePV)
}

// Attached volumes: the volume of a released PV is not
// deleted while a VolumeAttachment names the PV (no attach/detach
// controller runs here, so it stays until the test deletes it): the PV and
// the driver's volume stay, and the PV's VolumeFailedDelete Event names the
// attachment. Once the attachment is gone, PV and volume are deleted.
func TestDeleteWaitsForVolumeAttachment(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	volumeOf(t, ctx, pv)
	vaName := "va-" + ns
	pvName := pv.Name
	if _, err := client.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: vaName},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "n-attached",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().VolumeAttachments().Delete(context.WithoutCancel(ctx), vaName, metav1.DeleteOptions{})
	})
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "VolumeAttachment " + vaName + " (node n-attached)"
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return strings.Contains(lab.EventsOf(ctx, env.Cluster, metav1.NamespaceDefault, "PersistentVolume", pvName), want), nil
	}); err != nil {
		t.Fatalf("no Event on PV %s naming %q: %v; events: %s", pvName, want, err, lab.EventsOf(ctx, env.Cluster, metav1.NamespaceDefault, "PersistentVolume", pvName))
	}
	got, err := client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("PV deleted while attached: %v", err)
	}
	if got.Status.Phase != v1.VolumeReleased {
		t.Errorf("PV phase %s, want Released", got.Status.Phase)
	}
	volumeOf(t, ctx, pv) // fails if the driver deleted it

	if err := client.StorageV1().VolumeAttachments().Delete(ctx, vaName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPVGone(t, ctx, pvName)
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == pv.Spec.CSI.VolumeHandle {
			t.Errorf("driver still has volume %s after its PV was deleted", v.ID)
		}
	}
}
