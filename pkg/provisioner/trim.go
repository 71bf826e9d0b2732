package provisioner

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrimForCache is the transform of the provisioner's informers
// (informers.WithTransform): it drops, before an object is cached, what the
// provisioner never reads, so that the cache of a large cluster stays small.
//
//   - A Node keeps its name, UID, resourceVersion, timestamps and labels:
//     the segment index and the topology of a claim read labels only, and
//     the provisioner never writes a Node. Its status (conditions, images,
//     addresses, node info: most of a real Node's bytes, and rewritten by
//     every kubelet heartbeat), spec and annotations are dropped.
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
		return &v1.Node{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Generation: o.Generation,
			CreationTimestamp: o.CreationTimestamp, DeletionTimestamp: o.DeletionTimestamp, Labels: o.Labels,
		}}, nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}
