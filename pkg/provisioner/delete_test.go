package provisioner

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
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
	class := makeClass("secure").WithParams(
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
	wantParams := map[string]string{classparams.PVCNameKey: "data", classparams.PVCNamespaceKey: "apps", classparams.PVNameKey: "pvc-uid-data"}
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
	class := makeClass("secure").Immediate().WithParams(
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

// DeleteVolume gets the secret upstream external-provisioner v6.3.0 would
// send: the one the PV's annotations name (none when they are empty), else
// the provisioner secret of the PV's StorageClass (its own keys or the
// default secret), resolved for the PV's claimRef. A secret that is gone,
// a class that is gone and a PV without claimRef mean no secrets; a class of
// another provisioner is not read. A template that cannot be resolved, or a
// secret that exists but cannot be read, fails the delete (retried) without
// calling the driver.
func TestDeletionSecrets(t *testing.T) {
	creds := map[string]string{"password": "hunter2"}
	other := makeClass("foreign").WithParams("csi.storage.k8s.io/provisioner-secret-name", "data-creds",
		"csi.storage.k8s.io/provisioner-secret-namespace", "apps")
	other.Provisioner = "other.example.com"
	e := newEnv(t, envOptions{objs: []runtime.Object{
		secret("apps", "data-creds", creds),
		makeClass("secure").WithParams("csi.storage.k8s.io/provisioner-secret-name", "${pvc.name}-creds",
			"csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}").StorageClass,
		makeClass("shared").WithParams("csi.storage.k8s.io/secret-name", "data-creds",
			"csi.storage.k8s.io/secret-namespace", "apps").StorageClass,
		makeClass("by-annotation").WithParams("csi.storage.k8s.io/provisioner-secret-name", "${pvc.annotations['team']}",
			"csi.storage.k8s.io/provisioner-secret-namespace", "apps").StorageClass,
		other.StorageClass,
	}})
	e.client.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "locked" {
			return true, nil, apierrors.NewForbidden(v1.Resource("secrets"), "locked", errors.New("no access"))
		}
		return false, nil, nil
	})
	annotated := func(ns, name string) map[string]string {
		return map[string]string{annDeletionSecretName: name, annDeletionSecretNamespace: ns}
	}
	tests := []struct {
		name        string
		class       string
		annotations map[string]string
		noClaimRef  bool
		wantSecrets map[string]string
		wantErr     bool
	}{
		{name: "annotations name the secret", class: "shared", annotations: annotated("apps", "data-creds"), wantSecrets: creds},
		{name: "annotated secret is gone", class: "secure", annotations: annotated("apps", "absent")},
		{name: "empty annotations: no secret, the class is not read", class: "secure", annotations: annotated("", "")},
		{name: "no annotations: the class's provisioner secret", class: "secure", wantSecrets: creds},
		{name: "no annotations: the class's default secret", class: "shared", wantSecrets: creds},
		{name: "no annotations, class gone", class: "deleted"},
		{name: "no annotations, class of another provisioner", class: "foreign"},
		{name: "no annotations, no claimRef", class: "secure", noClaimRef: true},
		{name: "no annotations, template needs the claim's annotations", class: "by-annotation", wantErr: true},
		{name: "secret cannot be read", class: "secure", annotations: annotated("apps", "locked"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pv := &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-data", Annotations: tc.annotations},
				Spec: v1.PersistentVolumeSpec{
					StorageClassName: tc.class,
					ClaimRef:         &v1.ObjectReference{Namespace: "apps", Name: "data"},
					PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
						Driver: testDriver, VolumeHandle: "vol-gone"}},
				},
			}
			if tc.noClaimRef {
				pv.Spec.ClaimRef = nil
			}
			before := len(e.csi.deletes)
			err := e.p.Delete(e.ctx, pv)
			if tc.wantErr {
				if err == nil {
					t.Fatal("Delete succeeded, want an error")
				}
				if len(e.csi.deletes) != before {
					t.Error("DeleteVolume called although its secret could not be determined")
				}
				return
			}
			if err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if len(e.csi.deletes) != before+1 {
				t.Fatalf("DeleteVolume calls = %d, want 1", len(e.csi.deletes)-before)
			}
			if diff := cmp.Diff(tc.wantSecrets, e.csi.deletes[before].GetSecrets()); diff != "" {
				t.Errorf("DeleteVolume secrets (-want +got):\n%s", diff)
			}
		})
	}
}

// recordingCapacity records what Delete touches.
type recordingCapacity struct{ touched []string }

func (r *recordingCapacity) Touch(ts []*csi.Topology) {
	for _, t := range ts {
		r.touched = append(r.touched, topology.Segment(t.GetSegments()).String())
	}
}

func (r *recordingCapacity) Refresh(context.Context, []*csi.Topology, string) (map[string]string, error) {
	return nil, nil
}

// TestDeleteTouchesCapacity: deleting a volume asks for its segment's
// capacity to be refreshed, read back from the PV's node affinity.
func TestDeleteTouchesCapacity(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
	pv, _, err := e.provision(t, makePVC("data", "fast").withSelectedNode("n2").PersistentVolumeClaim, makeClass("fast").StorageClass, makeNode("n2", "z2"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingCapacity{}
	e.p.deps.Capacity = rec
	if err := e.p.Delete(e.ctx, pv); err != nil {
		t.Fatal(err)
	}
	want := []string{topology.Segment(zoneTopo("z2")[0].GetSegments()).String()}
	if diff := cmp.Diff(want, rec.touched); diff != "" {
		t.Errorf("touched segments (-want +got):\n%s", diff)
	}
}
