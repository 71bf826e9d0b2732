package informercache

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// FeedIndex registers the index's handlers on the Node and CSINode informers
// and returns functions that report when each handler has seen the initial
// list: requirements computed before that could miss segments.
func FeedIndex(index *topology.Index, nodes, csiNodes cache.SharedIndexInformer) ([]cache.InformerSynced, error) {
	// A node's name and labels, whether the informer caches Nodes or
	// their metadata (NewNodeInformer).
	upsertNode := func(o metav1.Object) { index.UpsertNodeLabels(o.GetName(), o.GetLabels()) }
	nodeReg, err := nodes.AddEventHandler(indexHandler(upsertNode, index.DeleteNode))
	if err != nil {
		return nil, fmt.Errorf("watching nodes: %w", err)
	}
	csiNodeReg, err := csiNodes.AddEventHandler(indexHandler(index.UpsertCSINode, index.DeleteCSINode))
	if err != nil {
		return nil, fmt.Errorf("watching CSINodes: %w", err)
	}
	return []cache.InformerSynced{nodeReg.HasSynced, csiNodeReg.HasSynced}, nil
}

// indexHandler feeds informer events of one object type to the index: adds
// and updates to upsert, deletions (also as tombstones) to remove.
func indexHandler[T metav1.Object](upsert func(T), remove func(name string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o.GetName())
			}
		},
	}
}
