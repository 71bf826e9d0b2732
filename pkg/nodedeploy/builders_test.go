package nodedeploy

import (
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
)

const (
	testDriver = "csi.example.com"
	zoneKey    = "topology.example.com/zone"
)

// n1Deployment is the instance of node n1, in zone z1.
func n1Deployment() *Config {
	return (&Config{NodeName: "n1", Topology: map[string]string{zoneKey: "z1"}, ImmediateBinding: true,
		BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}).WithDefaults()
}

// testClaim is a builder of claims: namespace apps, 1Gi.
type testClaim struct{ *v1.PersistentVolumeClaim }

func makePVC(name, class string) testClaim {
	return testClaim{&v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class),
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}}
}

func (c testClaim) withSelectedNode(node string) testClaim {
	c.Annotations[volume.AnnSelectedNode] = node
	return c
}

// forDriver: the PV controller left the claim to the driver.
func (c testClaim) forDriver() testClaim {
	c.Annotations[annStorageProvisioner] = testDriver
	return c
}

// makeClass is a class of the driver that waits for the first consumer,
// or binds at once (immediate).
func makeClass(name string, immediate bool) *storagev1.StorageClass {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if immediate {
		mode = storagev1.VolumeBindingImmediate
	}
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: testDriver, VolumeBindingMode: &mode}
}

// pvWithTerm is a PV whose required node affinity is the one term of
// these expressions.
func pvWithTerm(exprs ...v1.NodeSelectorRequirement) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: exprs}}}}
	return pv
}

func pvWithZones(zones ...string) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	if len(zones) == 0 {
		return pv
	}
	var terms []v1.NodeSelectorTerm
	for _, z := range zones {
		terms = append(terms, v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{z}}}})
	}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}
	return pv
}
