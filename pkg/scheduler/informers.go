package scheduler

import (
	"maps"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
)

// NewFromInformers builds a Core for cfg on the informers of factory
// (before it starts): claims, PVs, classes, nodes, CSINodes, pods,
// VolumeAttachments and CSIStorageCapacities, with the indexes the attach
// limit count and the capacity lookup need, and event handlers that keep
// the ledger in step:
//   - claim events: an unbound claim of the driver with a selected node
//     reserves its request in that node's segment (the extender never sees
//     Reserve, and the plugin needs this for claims selected before a
//     restart or by another scheduler); a claim's reservation ends when it
//     is deleted or loses its selected-node annotation (not on other updates
//     of a claim without one: the plugin reserves claims before the
//     annotation is written);
//   - a deleted pod's reservations end, except those of claims that are
//     selected for a node or bound in the claim informer (csi-provisioner
//     still provisions them; their claim events end them);
//   - a CSINode added, updated or deleted drops the node's cached segment
//     (segments.go);
//   - a Node added (or relabelled) and a CSINode added
//     or updated re-observe the claims selected for that node, and a
//     StorageClass of the driver added re-observes the selected claims of
//     that class, so a claim seen before its node, CSINode or class (at
//     start-up the informers fill in any order) is reserved once they are
//     known.
//
// The Core's other reads are opt's (each may be nil); cfg.CSINodeEvents is
// set, since the handlers see every CSINode event.
func NewFromInformers(cfg Config, factory informers.SharedInformerFactory, opt OptionalSources) (*Core, error) {
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
	cfg.CSINodeEvents = true
	core, err := New(cfg, Listers{
		Claims: claims.Lister(), Volumes: volumes.Lister(), Classes: classes.Lister(), CSINodes: csiNodes.Lister(), Capacities: capacities,
		Snapshots: opt.Snapshots, Liveness: opt.Liveness, CSIDrivers: opt.CSIDrivers,
	}, counter, nil)
	if err != nil {
		return nil, err
	}
	h := handlers{core: core, nodes: nodes.Lister(), claims: claims.Lister(), selected: claims.Informer().GetIndexer()}
	if _, err := claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.claimChanged(nil, obj) },
		UpdateFunc: h.claimChanged,
		DeleteFunc: h.claimDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: h.podDeleted}); err != nil {
		return nil, err
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: h.nodeAdded,
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := obj.(*v1.Node)
			if ok1 && ok2 && !maps.Equal(o.Labels, n.Labels) {
				h.nodeAdded(obj)
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := csiNodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.csiNodeChanged,
		UpdateFunc: func(_, obj any) { h.csiNodeChanged(obj) },
		DeleteFunc: h.csiNodeDeleted,
	}); err != nil {
		return nil, err
	}
	_, err = classes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: h.classAdded})
	return core, err
}

// OptionalSources are the reads of a Core that NewFromInformers does not
// take from its informer factory: their informers are the caller's, started
// when their API appears. Each may be nil; Listers says what nil turns off.
type OptionalSources struct {
	// Snapshots follows a restore's VolumeSnapshot (SnapshotInformer).
	Snapshots SnapshotSource
	// Liveness reads the driver's heartbeat Leases (HeartbeatInformer).
	Liveness LivenessSource
	// CSIDrivers reads the driver's CSIDriver object.
	CSIDrivers storagelisters.CSIDriverLister
}

// handlers are the informer event handlers of NewFromInformers.
type handlers struct {
	core   *Core
	nodes  corelisters.NodeLister
	claims corelisters.PersistentVolumeClaimLister
	// selected is the claim indexer with limits.ClaimsBySelectedNode.
	selected cache.Indexer
}

// claimChanged handles a claim's add (old nil) or update. An unbound claim
// without a selected node ends its reservation only if it just lost the
// annotation.
func (h handlers) claimChanged(oldObj, obj any) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if claim.Spec.VolumeName == "" && claim.Annotations[annSelectedNode] == "" {
		if old, ok := oldObj.(*v1.PersistentVolumeClaim); ok && old.Annotations[annSelectedNode] != "" {
			h.core.Ledger().Release(claim.UID)
		}
		return
	}
	h.observe(claim)
}

// observe feeds a bound claim, or one with a selected node, to the ledger.
func (h handlers) observe(obj any) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	node, _ := h.nodes.Get(claim.Annotations[annSelectedNode])
	h.core.ObserveClaim(claim, node)
}

func (h handlers) claimDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
		h.core.Ledger().Release(c.UID)
	}
}

// podDeleted ends the pod's reservations but those of claims the claim
// informer has selected for a node or bound: csi-provisioner provisions an
// annotated claim whether or not its pod still exists, so its storage stays
// reserved until the claim binds (and the capacity counts it) or loses the
// annotation.
func (h handlers) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	var keep map[types.UID]bool
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		claim, err := h.claims.PersistentVolumeClaims(pod.Namespace).Get(vol.PersistentVolumeClaim.ClaimName)
		if err != nil || (claim.Annotations[annSelectedNode] == "" && claim.Spec.VolumeName == "") {
			continue
		}
		if keep == nil {
			keep = map[types.UID]bool{}
		}
		keep[claim.UID] = true
	}
	h.core.Ledger().ReleasePod(pod.Namespace+"/"+pod.Name, func(uid types.UID) bool { return keep[uid] })
}

func (h handlers) nodeAdded(obj any) {
	if n, ok := obj.(*v1.Node); ok {
		h.reobserve(n.Name)
	}
}

// csiNodeChanged drops the node's cached segment, then re-observes its
// selected claims with the new CSINode.
func (h handlers) csiNodeChanged(obj any) {
	if n, ok := obj.(*storagev1.CSINode); ok {
		h.core.CSINodeChanged(n.Name)
		h.reobserve(n.Name)
	}
}

func (h handlers) csiNodeDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*storagev1.CSINode); ok {
		h.core.CSINodeChanged(n.Name)
	}
}

// classAdded re-observes the selected claims of a class of the driver:
// cost O(claims selected for any node); classes are added rarely.
func (h handlers) classAdded(obj any) {
	class, ok := obj.(*storagev1.StorageClass)
	if !ok || class.Provisioner != h.core.cfg.Driver {
		return
	}
	for _, node := range h.selected.ListIndexFuncValues(limits.ClaimsBySelectedNode) {
		objs, err := h.selected.ByIndex(limits.ClaimsBySelectedNode, node)
		if err != nil {
			continue
		}
		for _, obj := range objs {
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok && c.Spec.StorageClassName != nil && *c.Spec.StorageClassName == class.Name {
				h.observe(c)
			}
		}
	}
}

// reobserve observes again the unbound claims selected for a node: cost
// O(claims selected for it).
func (h handlers) reobserve(node string) {
	objs, err := h.selected.ByIndex(limits.ClaimsBySelectedNode, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		h.observe(obj)
	}
}
