package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
)

// ClaimObservation says how claim events feed the ledger.
type ClaimObservation int

const (
	// ReleaseOnly ends a claim's reservation when it binds, loses its
	// selected node or is deleted, and reserves nothing itself: only a
	// front end's Reserve does.
	ReleaseOnly ClaimObservation = iota
	// ReserveSelected also reserves claims that have a selected node: the
	// extender never sees Reserve, and the plugin needs it for claims
	// selected before a restart or by another scheduler.
	ReserveSelected
)

// NewFromInformers builds a Core for cfg on the informers of factory
// (before it starts): claims, PVs, classes, nodes, CSINodes, pods,
// VolumeAttachments and CSIStorageCapacities, with the indexes the attach
// limit count and the capacity lookup need, and claim event handlers that
// keep the ledger in step as obs says.
func NewFromInformers(cfg Config, factory informers.SharedInformerFactory, obs ClaimObservation) (*Core, error) {
	pods, claims := factory.Core().V1().Pods(), factory.Core().V1().PersistentVolumeClaims()
	volumes, nodes := factory.Core().V1().PersistentVolumes(), factory.Core().V1().Nodes()
	classes, csiNodes := factory.Storage().V1().StorageClasses(), factory.Storage().V1().CSINodes()
	attachments := factory.Storage().V1().VolumeAttachments()
	if err := limits.AddIndexers(pods.Informer(), claims.Informer(), attachments.Informer()); err != nil {
		return nil, err
	}
	capacities, err := NewCapacitySource(factory.Storage().V1().CSIStorageCapacities().Informer())
	if err != nil {
		return nil, err
	}
	counter := limits.NewCounter(cfg.Driver, limits.Stores{
		Pods: pods.Informer().GetIndexer(), Claims: claims.Informer().GetIndexer(), Attachments: attachments.Informer().GetIndexer(),
		Volumes: volumes.Informer().GetStore(), Classes: classes.Informer().GetStore(),
		Nodes: nodes.Informer().GetStore(), CSINodes: csiNodes.Informer().GetStore(),
	})
	core, err := New(cfg, Listers{
		Claims: claims.Lister(), Volumes: volumes.Lister(), Classes: classes.Lister(), CSINodes: csiNodes.Lister(), Capacities: capacities,
	}, counter, nil)
	if err != nil {
		return nil, err
	}
	observe := func(obj any) {
		claim, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok {
			return
		}
		var node *v1.Node
		if obs == ReserveSelected {
			node, _ = nodes.Lister().Get(claim.Annotations[annSelectedNode])
		} else if claim.Spec.VolumeName == "" && claim.Annotations[annSelectedNode] != "" {
			return // the plugin's own Reserve holds it
		}
		core.ObserveClaim(claim, node)
	}
	_, err = claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				core.Ledger().Release(c.UID)
			}
		},
	})
	return core, err
}
