// Package owner finds the object that controls a pod a given number of
// levels up (the pod itself, its ReplicaSet, the ReplicaSet's Deployment,
// ...), as external-provisioner's --capacity-ownerref-level does, to make it
// the owner of objects the pod creates.
package owner

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// MetadataGetter reads the metadata of one namespaced object of any kind.
type MetadataGetter func(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*metav1.ObjectMeta, error)

// Lookup returns a controller reference to the object levels up from the
// pod namespace/pod: 0 is the pod itself, 1 its controller (for example a
// ReplicaSet or StatefulSet), 2 that one's controller (a Deployment), and
// so on. Each step follows the ownerReference with controller: true.
// Objects below the last level are read with get.
func Lookup(ctx context.Context, get MetadataGetter, namespace, pod string, levels int) (*metav1.OwnerReference, error) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	name := pod
	meta, err := get(ctx, gvk, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	if levels == 0 {
		return controllerRef(gvk.GroupVersion().String(), gvk.Kind, name, meta), nil
	}
	for level := 1; ; level++ {
		ref := metav1.GetControllerOfNoCopy(meta)
		if ref == nil {
			return nil, fmt.Errorf("%s %s/%s has no controlling owner (looking %d level(s) up from pod %s)", gvk.Kind, namespace, name, levels, pod)
		}
		if level == levels {
			t := true
			return &metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: &t}, nil
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("owner of %s %s/%s: %w", gvk.Kind, namespace, name, err)
		}
		gvk, name = gv.WithKind(ref.Kind), ref.Name
		if meta, err = get(ctx, gvk, namespace, name); err != nil {
			return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, namespace, name, err)
		}
	}
}

func controllerRef(apiVersion, kind, name string, meta *metav1.ObjectMeta) *metav1.OwnerReference {
	t := true
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: meta.UID, Controller: &t}
}

// NewMetadataGetter reads objects' metadata through the metadata API,
// finding each kind's resource by discovery.
func NewMetadataGetter(cfg *rest.Config) (MetadataGetter, error) {
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return func(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*metav1.ObjectMeta, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, err
		}
		obj, err := client.Resource(m.Resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &obj.ObjectMeta, nil
	}, nil
}
