package main

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attachLimitPrefix starts the allocatable resource that carries a node's
// attach limit for a CSI driver (attachable-volumes-csi-<driver>).
const attachLimitPrefix = "attachable-volumes-csi-"

// trimForCache is the transform of the extender's informers: it drops,
// before an object is cached, what the filter never reads.
//
//   - A Node keeps its name, UID, resourceVersion, timestamps, labels and
//     the attach limits among its allocatable resources; its spec,
//     annotations and the rest of its status (conditions, images,
//     addresses, node info) are dropped.
//   - A Pod keeps its metadata, spec and phase (the volume count skips
//     finished pods); the rest of its status is dropped.
//   - Every object loses its managedFields.
//
// The extender never writes what it caches. Applied twice it gives the same
// result.
func trimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Node:
		n := &v1.Node{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Generation: o.Generation,
			CreationTimestamp: o.CreationTimestamp, DeletionTimestamp: o.DeletionTimestamp, Labels: o.Labels,
		}}
		for name, q := range o.Status.Allocatable {
			if strings.HasPrefix(string(name), attachLimitPrefix) {
				if n.Status.Allocatable == nil {
					n.Status.Allocatable = v1.ResourceList{}
				}
				n.Status.Allocatable[name] = q
			}
		}
		return n, nil
	case *v1.Pod:
		o.ManagedFields = nil
		o.Status = v1.PodStatus{Phase: o.Status.Phase}
		return o, nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}
