// Package testobjects builds the API objects unit tests feed a fake
// clientset with: Nodes with a zone label, the CSINode entry of a driver and
// StorageClasses of a driver. The driver name and the topology key are
// arguments, so that each package's tests keep their own. For tests only.
package testobjects

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is the Node name with the label key=zone, or without labels where
// zone is empty.
func Node(name, key, zone string) *v1.Node {
	labels := map[string]string{}
	if zone != "" {
		labels[key] = zone
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// CSINode is the CSINode of node name with one entry: driver, with the
// node's name as its node ID and these topology keys.
func CSINode(name, driver string, keys ...string) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: driver, NodeID: name, TopologyKeys: keys},
		}},
	}
}

// Class builds a StorageClass; its methods change the class they are called
// on and return it, so that they chain.
type Class struct{ *storagev1.StorageClass }

// NewClass is the class name of driver, which waits for the first consumer.
func NewClass(name, driver string) Class {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	return Class{&storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       driver,
		VolumeBindingMode: &mode,
	}}
}

// Immediate makes the class bind at once.
func (c Class) Immediate() Class {
	mode := storagev1.VolumeBindingImmediate
	c.VolumeBindingMode = &mode
	return c
}

// WithAllowedTopology sets the class's allowedTopologies to one term: key
// in values.
func (c Class) WithAllowedTopology(key string, values ...string) Class {
	c.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
		{Key: key, Values: values},
	}}}
	return c
}

// WithParams sets the class's parameters to kv, read as key, value pairs
// (a last key without a value is dropped).
func (c Class) WithParams(kv ...string) Class {
	c.Parameters = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Parameters[kv[i]] = kv[i+1]
	}
	return c
}
