package nodedeploy

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/storage/volume"
)

// dropManagedFields stands for the provisioner's own trimming, which
// Transform applies first.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// A node's instance caches other nodes' claims as stubs, its own and the
// unselected pending ones whole.
func TestNodeDeploymentTrimsForeignClaims(t *testing.T) {
	transform := n1Deployment().Transform(dropManagedFields)
	bound := makePVC("b", "c").PersistentVolumeClaim
	bound.Spec.VolumeName = "pv-b"
	tests := []struct {
		name     string
		claim    *v1.PersistentVolumeClaim
		wantStub bool
	}{
		{name: "selected for this node", claim: makePVC("a", "c").withSelectedNode("n1").PersistentVolumeClaim},
		{name: "pending without a node (an immediate claim to race for)", claim: makePVC("a", "c").PersistentVolumeClaim},
		{name: "selected for another node", claim: makePVC("a", "c").withSelectedNode("n2").PersistentVolumeClaim, wantStub: true},
		{name: "bound, no node", claim: bound, wantStub: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.claim.DeepCopy()
			in.Labels = map[string]string{"app": "x"}
			in.Finalizers = []string{"example.com/record"}
			in.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
			src := &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
			in.Spec.DataSource = src
			out, err := transform(in)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*v1.PersistentVolumeClaim)
			if got.ManagedFields != nil {
				t.Error("managedFields kept: the base transform did not run")
			}
			isStub := got.Labels == nil && len(got.Spec.Resources.Requests) == 0
			if isStub != tc.wantStub {
				t.Fatalf("stub = %v, want %v: %+v", isStub, tc.wantStub, got)
			}
			if got.Name != in.Name || got.UID != in.UID || got.Spec.VolumeName != in.Spec.VolumeName || got.Spec.DataSource != src ||
				got.Annotations[volume.AnnSelectedNode] != in.Annotations[volume.AnnSelectedNode] || !slices.Equal(got.Finalizers, in.Finalizers) {
				t.Errorf("trimmed claim lost what the instance reads: %+v", got)
			}
		})
	}
}

// A node's instance caches other nodes' PVs as stubs, its own whole.
func TestNodeDeploymentTrimsForeignPVs(t *testing.T) {
	nd := n1Deployment()
	transform := nd.Transform(dropManagedFields)
	full := func(zone string) *v1.PersistentVolume {
		pv := pvWithZones(zone)
		pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": testDriver}
		pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}
		pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1", VolumeAttributes: map[string]string{"a": "b"}}
		pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: "apps", Name: "data", UID: "uid-data"}
		pv.Status.Phase = v1.VolumeBound
		return pv
	}
	own, err := transform(full("z1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(full("z1"), own); diff != "" {
		t.Errorf("own PV changed (-want +got):\n%s", diff)
	}
	got, err := transform(full("z2"))
	if err != nil {
		t.Fatal(err)
	}
	stub := got.(*v1.PersistentVolume)
	want := full("z2")
	if stub.Annotations != nil || stub.Spec.Capacity != nil || stub.Spec.CSI.VolumeAttributes != nil {
		t.Errorf("stub keeps what no consumer reads: %+v", stub)
	}
	if stub.Spec.CSI.VolumeHandle != "vol-1" || stub.Spec.ClaimRef.UID != "uid-data" || stub.Status.Phase != v1.VolumeBound ||
		!cmp.Equal(stub.Spec.NodeAffinity, want.Spec.NodeAffinity) || nd.OwnsVolume(stub) {
		t.Errorf("stub lost what the instance reads: %+v", stub)
	}
}
