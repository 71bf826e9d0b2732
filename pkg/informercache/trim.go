// Package informercache holds what every mode of the provisioner does to
// its informers' caches: the transforms that trim objects before they are
// cached (TrimForCache, TrimForDriver), the metadata-only Node informer and
// the lister that serves it as *v1.Node (NewNodeInformer, NewNodeLister),
// and the metrics of the claim and PV caches (RegisterMetrics).
package informercache

import (
	"unique"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TrimForCache is the transform of the provisioner's informers
// (informers.WithTransform): it drops, before an object is cached, what the
// provisioner never reads, so that the cache of a large cluster stays small.
//
//   - A Node keeps its name, UID, resourceVersion, timestamps and labels:
//     the segment index and the topology of a claim read labels only, and
//     the provisioner never writes a Node. Its status (conditions, images,
//     addresses, node info: most of a real Node's bytes, and rewritten by
//     every kubelet heartbeat), spec and annotations are dropped. Its
//     labels are interned (internLabels): most of them repeat on every node.
//   - Every object loses its managedFields. Updates of a cached object (a
//     claim's annotations, a PV's finalizer, a capacity object) still keep
//     the server's managedFields: an update without them leaves them as
//     they are.
//
// It returns a new Node and changes other objects in place (the informer
// owns them); applied twice it gives the same result.
func TrimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Node:
		return trimmedNode(o.ObjectMeta), nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// TrimForDriver is TrimForCache for the informers of driver's provisioner:
// besides, a CSINode keeps its identity and driver's entry only, its
// topology keys interned. The segment index and a claim's requirements
// read nothing else of a CSINode (DriverKeys with this driver); a CSINode
// without an entry for driver keeps none, and reads as "driver not
// registered" as it did whole.
func TrimForDriver(driver string) cache.TransformFunc {
	return func(obj any) (any, error) {
		if c, ok := obj.(*storagev1.CSINode); ok {
			return trimmedCSINode(c, driver), nil
		}
		return TrimForCache(obj)
	}
}

// trimmedNode is what the provisioner keeps of a Node: its identity and
// labels.
func trimmedNode(meta metav1.ObjectMeta) *v1.Node {
	return &v1.Node{ObjectMeta: identity(meta, internLabels(meta.Labels, meta.Name))}
}

// identity is the part of an object's metadata a trimmed object keeps:
// name, UID, version, timestamps, and labels.
func identity(meta metav1.ObjectMeta, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: meta.Name, UID: meta.UID, ResourceVersion: meta.ResourceVersion, Generation: meta.Generation,
		CreationTimestamp: meta.CreationTimestamp, DeletionTimestamp: meta.DeletionTimestamp, Labels: labels,
	}
}

// trimmedCSINode is what the provisioner of driver keeps of a CSINode: its
// identity and driver's entry (see TrimForDriver).
func trimmedCSINode(c *storagev1.CSINode, driver string) *storagev1.CSINode {
	out := &storagev1.CSINode{ObjectMeta: identity(c.ObjectMeta, nil)}
	for _, d := range c.Spec.Drivers {
		if d.Name != driver {
			continue
		}
		var keys []string
		if d.TopologyKeys != nil {
			keys = make([]string, len(d.TopologyKeys))
			for i, k := range d.TopologyKeys {
				keys[i] = intern(k)
			}
		}
		out.Spec.Drivers = []storagev1.CSINodeDriver{{Name: driver, NodeID: d.NodeID, TopologyKeys: keys, Allocatable: d.Allocatable}}
		break
	}
	return out
}

// intern returns the canonical copy of s: decoding gives each object its
// own copy of every string, while label keys, most label values and
// topology keys are the same on every node of a cluster. The canonical
// copies are weak (package unique): one no cached object uses any more is
// dropped.
func intern(s string) string { return unique.Make(s).Value() }

// internLabels returns a copy of a node's labels with keys and values
// interned, except a value equal to the node's name (kubernetes.io/hostname
// usually), which shares name's string instead: interning a string unique to
// one node would only add an entry to the table. nil stays nil.
func internLabels(labels map[string]string, name string) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		if v == name {
			v = name
		} else {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}
