package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestVolumeNameFlags: with --volume-name-prefix=k8s
// --volume-name-uuid-length=10 the volume and its PV are both named
// k8s-<first 10 characters of the claim UID without dashes>, as upstream
// external-provisioner v6.3.0 names them, and so are
// csi.storage.k8s.io/pv/name and ${pv.name} in a secret template. The claim
// binds, and deleting it deletes the volume and leaves no PV.
func TestVolumeNameFlags(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	if err := env.StartProvisioner("--volume-name-prefix=k8s", "--volume-name-uuid-length=10", "--extra-create-metadata"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := namesClass(t, ctx, ns+"-names")
	pvc := lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	want := "k8s-" + strings.ReplaceAll(string(pvc.UID), "-", "")[:10]

	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	vol := volumeOf(t, ctx, pv)
	got := map[string]string{
		"PV":                         pv.Name,
		"driver's volume":            vol.Name,
		"csi.storage.k8s.io/pv/name": vol.Parameters["csi.storage.k8s.io/pv/name"],
		"${pv.name} secret":          secretName(pv),
	}
	for what, name := range got {
		if name != want {
			t.Errorf("%s = %q, want %q", what, name, want)
		}
	}
	// The in-flight record goes once the PV, of the new name, is seen.
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		return err == nil && !slices.Contains(c.Finalizers, inflight.Finalizer), nil
	}); err != nil {
		t.Errorf("the bound claim keeps its in-flight record: %v", err)
	}

	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if _, err := client.CoreV1().PersistentVolumes().Get(ctx, want, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		vols, err := env.Volumes(ctx)
		if err != nil {
			return false, nil
		}
		for _, v := range vols {
			if v.Name == want || v.ID == vol.ID {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("PV %s or volume %s (%s) left after the claim's deletion: %v", want, vol.ID, want, err)
	}
}

// namesClass creates an immediate-binding class of the mock driver whose
// node-publish secret is named by the ${pv.name} template, and deletes it
// when the test ends.
func namesClass(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	mode := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driverName, VolumeBindingMode: &mode,
		Parameters: map[string]string{
			"csi.storage.k8s.io/node-publish-secret-name":      "${pv.name}",
			"csi.storage.k8s.io/node-publish-secret-namespace": "${pvc.namespace}",
		}}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return name
}

func secretName(pv *v1.PersistentVolume) string {
	if pv.Spec.CSI == nil || pv.Spec.CSI.NodePublishSecretRef == nil {
		return ""
	}
	return pv.Spec.CSI.NodePublishSecretRef.Name
}
