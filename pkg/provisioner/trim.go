package provisioner

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
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
		return trimmedNode(o.ObjectMeta), nil
	case metav1.Object:
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// trimmedNode is what the provisioner keeps of a Node: its identity and
// labels.
func trimmedNode(meta metav1.ObjectMeta) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: meta.Name, UID: meta.UID, ResourceVersion: meta.ResourceVersion, Generation: meta.Generation,
		CreationTimestamp: meta.CreationTimestamp, DeletionTimestamp: meta.DeletionTimestamp, Labels: meta.Labels,
	}}
}

// nodeFromMetadata is the transform of the metadata-only Node informer: it
// turns each PartialObjectMetadata into the trimmed *v1.Node that
// TrimForCache would keep, so that listers and handlers see Nodes.
func nodeFromMetadata(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return trimmedNode(m.ObjectMeta), nil
	}
	return obj, nil
}

// newNodeInformer returns the provisioner's Node informer. With a metadata
// client it watches Nodes as metadata only: the API server then sends
// neither their spec nor their status (most of a Node's bytes, and what
// every kubelet heartbeat changes), so nothing of it is decoded, and the
// cache holds trimmed *v1.Node objects (run it with Run). Without one it is
// the factory's typed informer, trimmed by TrimForCache (started with the
// factory). tweak narrows what the metadata informer lists (node
// deployment: the instance's own node); the factory's own options narrow
// the typed one.
func newNodeInformer(meta metadata.Interface, factory informers.SharedInformerFactory, resync time.Duration, tweak func(*metav1.ListOptions)) (cache.SharedIndexInformer, bool) {
	if meta == nil {
		return factory.Core().V1().Nodes().Informer(), false
	}
	inf := metadatainformer.NewFilteredMetadataInformer(meta, v1.SchemeGroupVersion.WithResource("nodes"), metav1.NamespaceAll,
		resync, cache.Indexers{}, tweak).Informer()
	// Only fails once the informer runs.
	_ = inf.SetTransform(nodeFromMetadata)
	return inf, true
}
