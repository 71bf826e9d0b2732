package provisioner

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

func secret(ns, name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestSecretsAndDelete(t *testing.T) {
	e := newEnv(t, envOptions{
		cfg:   Config{SupportsTopology: true, ExtraCreateMetadata: true},
		nodes: threeZones,
		objs:  []runtime.Object{secret("apps", "data-creds", map[string]string{"password": "hunter2"})},
	})
	class := makeClass("secure").withParams(
		"csi.storage.k8s.io/provisioner-secret-name", "${pvc.name}-creds",
		"csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}",
		"csi.storage.k8s.io/node-publish-secret-name", "publish-${pv.name}",
		"csi.storage.k8s.io/node-publish-secret-namespace", "vault",
		"csi.storage.k8s.io/controller-expand-secret-name", "expand",
		"csi.storage.k8s.io/controller-expand-secret-namespace", "vault",
	)
	claim := makePVC("data", "secure").withSelectedNode("n1")
	pv, _, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, makeNode("n1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	req := e.csi.lastCreate(t)
	if diff := cmp.Diff(map[string]string{"password": "hunter2"}, req.GetSecrets()); diff != "" {
		t.Errorf("CreateVolume secrets (-want +got):\n%s", diff)
	}
	wantParams := map[string]string{paramPVCName: "data", paramPVCNamespace: "apps", paramPVName: "pvc-uid-data"}
	if diff := cmp.Diff(wantParams, req.GetParameters()); diff != "" {
		t.Errorf("extra create metadata (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1.SecretReference{Name: "publish-pvc-uid-data", Namespace: "vault"}, pv.Spec.CSI.NodePublishSecretRef); diff != "" {
		t.Errorf("node publish secret (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1.SecretReference{Name: "expand", Namespace: "vault"}, pv.Spec.CSI.ControllerExpandSecretRef); diff != "" {
		t.Errorf("controller expand secret (-want +got):\n%s", diff)
	}
	if pv.Annotations[annDeletionSecretName] != "data-creds" || pv.Annotations[annDeletionSecretNamespace] != "apps" {
		t.Errorf("deletion secret annotations = %v", pv.Annotations)
	}

	// Delete sends the recorded secret and removes the volume.
	if err := e.p.Delete(e.ctx, pv); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"password": "hunter2"}, e.csi.deletes[0].GetSecrets()); diff != "" {
		t.Errorf("DeleteVolume secrets (-want +got):\n%s", diff)
	}
	if n := len(e.mock.Volumes()); n != 0 {
		t.Errorf("driver still has %d volumes", n)
	}
	// Deleting again is fine: the driver no longer knows the volume.
	if err := e.p.Delete(e.ctx, pv); err != nil {
		t.Errorf("second delete: %v", err)
	}
}

func TestProvisionMissingSecret(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
	class := makeClass("secure").immediate().withParams(
		"csi.storage.k8s.io/provisioner-secret-name", "absent",
		"csi.storage.k8s.io/provisioner-secret-namespace", "apps")
	_, state, err := e.provision(t, makePVC("a", "secure").PersistentVolumeClaim, class.StorageClass, nil)
	if err == nil || state != controller.ProvisioningNoChange {
		t.Fatalf("Provision = %v, %v; want NoChange with an error", state, err)
	}
	if len(e.csi.creates) != 0 {
		t.Error("CreateVolume called without its secret")
	}
}

func TestDeleteIgnoresOtherDrivers(t *testing.T) {
	e := newEnv(t, envOptions{nodes: threeZones})
	for _, pv := range []*v1.PersistentVolume{
		{ObjectMeta: metav1.ObjectMeta{Name: "nfs"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: "other.example.com", VolumeHandle: "x"}}}},
	} {
		var ignored *controller.IgnoredError
		if err := e.p.Delete(e.ctx, pv); !errors.As(err, &ignored) {
			t.Errorf("Delete(%s) = %v, want IgnoredError", pv.Name, err)
		}
	}
}
