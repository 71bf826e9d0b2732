package informercache

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// nodeFromMetadata is the transform of the metadata-only Node informer: it
// keeps of each PartialObjectMetadata what TrimForCache keeps of a Node,
// as a PartialObjectMetadata: 288 bytes a node, where a *v1.Node with an
// empty spec and status takes 768. NewNodeLister serves them as *v1.Node.
func nodeFromMetadata(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{ObjectMeta: identity(m.ObjectMeta, internLabels(m.ObjectMeta.Labels, m.Name))}, nil
	}
	return obj, nil
}

// nodeLister serves the Node informer's cache as *v1.Node, whichever the
// informer caches: trimmed *v1.Node (typed informer) or
// *metav1.PartialObjectMetadata (metadata-only informer, nodeFromMetadata).
// For the latter each Get and List makes a *v1.Node of the cached metadata,
// whose labels are the cache's: read only, as with any lister.
type nodeLister struct{ indexer cache.Indexer }

// NewNodeLister serves indexer, the cache of a Node informer of
// NewNodeInformer, as *v1.Node.
func NewNodeLister(indexer cache.Indexer) corelisters.NodeLister { return nodeLister{indexer} }

func (l nodeLister) List(selector labels.Selector) ([]*v1.Node, error) {
	var out []*v1.Node
	err := cache.ListAll(l.indexer, selector, func(obj any) {
		if n := asNode(obj); n != nil {
			out = append(out, n)
		}
	})
	return out, err
}

func (l nodeLister) Get(name string) (*v1.Node, error) {
	obj, exists, err := l.indexer.GetByKey(name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(v1.Resource("node"), name)
	}
	n := asNode(obj)
	if n == nil {
		return nil, fmt.Errorf("node %q: the cache holds a %T", name, obj)
	}
	return n, nil
}

// asNode returns a cached Node as a *v1.Node (nil if obj is neither).
func asNode(obj any) *v1.Node {
	switch o := obj.(type) {
	case *v1.Node:
		return o
	case *metav1.PartialObjectMetadata:
		return &v1.Node{ObjectMeta: o.ObjectMeta}
	}
	return nil
}

// NewNodeInformer returns the provisioner's Node informer. With a metadata
// client it watches Nodes as metadata only: the API server then sends
// neither their spec nor their status (most of a Node's bytes, and what
// every kubelet heartbeat changes), so nothing of it is decoded, and the
// cache holds their trimmed metadata (run it with Run). Without one it is
// the factory's typed informer, trimmed by TrimForCache (started with the
// factory); own reports the former. Read it through NewNodeLister, and its events as metav1.Object.
// tweak narrows what the metadata informer lists (node
// deployment: the instance's own node); the factory's own options narrow
// the typed one.
func NewNodeInformer(meta metadata.Interface, factory informers.SharedInformerFactory, resync time.Duration, tweak func(*metav1.ListOptions)) (inf cache.SharedIndexInformer, own bool) {
	if meta == nil {
		return factory.Core().V1().Nodes().Informer(), false
	}
	inf = metadatainformer.NewFilteredMetadataInformer(meta, v1.SchemeGroupVersion.WithResource("nodes"), metav1.NamespaceAll,
		resync, cache.Indexers{}, tweak).Informer()
	// Only fails once the informer runs.
	_ = inf.SetTransform(nodeFromMetadata)
	return inf, true
}
