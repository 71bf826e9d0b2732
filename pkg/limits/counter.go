package limits

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// Index names Counter needs on its informers (see AddIndexers).
const (
	// PodsByNode indexes pods by spec.nodeName.
	PodsByNode = "limits/pods-by-node"
	// ClaimsBySelectedNode indexes unbound claims by their
	// volume.kubernetes.io/selected-node annotation.
	ClaimsBySelectedNode = "limits/claims-by-selected-node"
	// AttachmentsByNode indexes VolumeAttachments by spec.nodeName.
	AttachmentsByNode = "limits/attachments-by-node"
)

const annSelectedNode = storagehelpers.AnnSelectedNode

// AddIndexers adds the indexes Counter reads to the pod, claim and
// VolumeAttachment informers. Call it before the informers start.
func AddIndexers(pods, claims, attachments cache.SharedIndexInformer) error {
	if err := pods.AddIndexers(cache.Indexers{PodsByNode: podsByNode}); err != nil {
		return fmt.Errorf("indexing pods: %w", err)
	}
	if err := claims.AddIndexers(cache.Indexers{ClaimsBySelectedNode: claimsBySelectedNode}); err != nil {
		return fmt.Errorf("indexing claims: %w", err)
	}
	if err := attachments.AddIndexers(cache.Indexers{AttachmentsByNode: attachmentsByNode}); err != nil {
		return fmt.Errorf("indexing volume attachments: %w", err)
	}
	return nil
}

func podsByNode(obj any) ([]string, error) {
	if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

func claimsBySelectedNode(obj any) ([]string, error) {
	if c, ok := obj.(*v1.PersistentVolumeClaim); ok && c.Spec.VolumeName == "" {
		if n := c.Annotations[annSelectedNode]; n != "" {
			return []string{n}, nil
		}
	}
	return nil, nil
}

func attachmentsByNode(obj any) ([]string, error) {
	if a, ok := obj.(*storagev1.VolumeAttachment); ok {
		return []string{a.Spec.NodeName}, nil
	}
	return nil, nil
}

// Stores are the informer stores Counter reads. Pods, Claims and
// Attachments must carry the indexes of AddIndexers.
type Stores struct {
	Pods, Claims, Attachments cache.Indexer
	Volumes, Classes          cache.Store
	Nodes, CSINodes           cache.Store
}

// Usage is what occupies a node's attach slots for one driver.
type Usage struct {
	// Attached counts distinct volumes (by handle) of the driver used by
	// pods on the node or attached to it.
	Attached int
	// Pending counts distinct unbound claims of the driver waiting to be
	// provisioned for the node: used by a pod on the node, or with the
	// node as selected-node.
	Pending int
}

// Total is Attached + Pending.
func (u Usage) Total() int { return u.Attached + u.Pending }

// Counter counts the volumes of one CSI driver that occupy a node and
// compares them with the node's limit. Every read comes from informer
// stores and the cost of one node is O(pods, attachments and pending claims
// of that node), independent of the cluster's size. Safe for concurrent use.
type Counter struct {
	driver string
	s      Stores
	// allocatable is the Node allocatable resource of the driver's attach
	// limit (attachable-volumes-csi-<driver>).
	allocatable v1.ResourceName
}

// NewCounter returns a Counter for driver over s.
func NewCounter(driver string, s Stores) *Counter {
	return &Counter{driver: driver, s: s, allocatable: v1.ResourceName("attachable-volumes-csi-" + driver)}
}

// Count returns the node's usage.
func (c *Counter) Count(node string) (Usage, error) {
	handles, pending, err := c.Volumes(node)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Attached: len(handles), Pending: len(pending)}, nil
}

// Volumes returns what Count counts on the node: the handles of the
// driver's volumes used by pods there or attached to it, and the unbound
// claims of the driver ("namespace/name") pending for it. The maps are the
// caller's; Count(node) is their sizes.
func (c *Counter) Volumes(node string) (handles, pending map[string]bool, err error) {
	handles = map[string]bool{}
	pending = map[string]bool{}
	pods, err := c.s.Pods.ByIndex(PodsByNode, node)
	if err != nil {
		return nil, nil, err
	}
	for _, obj := range pods {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		for _, vol := range pod.Spec.Volumes {
			if vol.PersistentVolumeClaim == nil {
				continue
			}
			claim, err := c.claim(pod.Namespace, vol.PersistentVolumeClaim.ClaimName)
			if err != nil || claim == nil {
				continue // a missing claim blocks the pod elsewhere
			}
			c.addClaim(claim, handles, pending)
		}
	}
	atts, err := c.s.Attachments.ByIndex(AttachmentsByNode, node)
	if err != nil {
		return nil, nil, err
	}
	for _, obj := range atts {
		a, ok := obj.(*storagev1.VolumeAttachment)
		if !ok || a.Spec.Attacher != c.driver || a.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		if h := c.handle(*a.Spec.Source.PersistentVolumeName); h != "" {
			handles[h] = true
		}
	}
	claims, err := c.s.Claims.ByIndex(ClaimsBySelectedNode, node)
	if err != nil {
		return nil, nil, err
	}
	for _, obj := range claims {
		if claim, ok := obj.(*v1.PersistentVolumeClaim); ok {
			c.addClaim(claim, handles, pending)
		}
	}
	return handles, pending, nil
}

// addClaim counts a claim: its volume's handle when bound to a PV of the
// driver, itself when unbound in a class of the driver.
func (c *Counter) addClaim(claim *v1.PersistentVolumeClaim, handles, pending map[string]bool) {
	if claim.Spec.VolumeName != "" {
		if h := c.handle(claim.Spec.VolumeName); h != "" {
			handles[h] = true
		}
		return
	}
	if claim.Spec.StorageClassName == nil {
		return
	}
	obj, ok, err := c.s.Classes.GetByKey(*claim.Spec.StorageClassName)
	if err != nil || !ok {
		return
	}
	if class, ok := obj.(*storagev1.StorageClass); ok && class.Provisioner == c.driver {
		pending[claim.Namespace+"/"+claim.Name] = true
	}
}

func (c *Counter) claim(ns, name string) (*v1.PersistentVolumeClaim, error) {
	obj, ok, err := c.s.Claims.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, err
	}
	claim, _ := obj.(*v1.PersistentVolumeClaim)
	return claim, nil
}

// handle returns the volume handle of a PV of the driver, or "".
func (c *Counter) handle(pvName string) string {
	obj, ok, err := c.s.Volumes.GetByKey(pvName)
	if err != nil || !ok {
		return ""
	}
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != c.driver {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
}

// Limit returns the node's attach limit for the driver: the CSINode entry's
// allocatable.count, else (version skew) the Node's allocatable
// "attachable-volumes-csi-<driver>", else nil (no limit).
func (c *Counter) Limit(node string) (*int64, error) {
	obj, ok, err := c.s.CSINodes.GetByKey(node)
	if err != nil {
		return nil, err
	}
	var csiNode *storagev1.CSINode
	if ok {
		csiNode, _ = obj.(*storagev1.CSINode)
	}
	if limit, ok := c.csiNodeLimit(csiNode); ok {
		return limit, nil
	}
	obj, ok, err = c.s.Nodes.GetByKey(node)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("nodes"), node)
	}
	n, _ := obj.(*v1.Node)
	return c.nodeLimit(n), nil
}

// LimitOf is Limit computed from the node's objects (csiNode may be nil):
// for callers that hold them, such as a scheduler's per-node cache.
func (c *Counter) LimitOf(node *v1.Node, csiNode *storagev1.CSINode) *int64 {
	if limit, ok := c.csiNodeLimit(csiNode); ok {
		return limit
	}
	return c.nodeLimit(node)
}

// nodeLimit is the Node's allocatable attachable-volumes-csi-<driver>.
func (c *Counter) nodeLimit(node *v1.Node) *int64 {
	if node == nil {
		return nil
	}
	if q, ok := node.Status.Allocatable[c.allocatable]; ok {
		v := q.Value()
		return &v
	}
	return nil
}

// csiNodeLimit is the driver entry's allocatable.count, if it has one.
func (c *Counter) csiNodeLimit(csiNode *storagev1.CSINode) (*int64, bool) {
	if csiNode == nil {
		return nil, false
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == c.driver && d.Allocatable != nil && d.Allocatable.Count != nil {
			n := int64(*d.Allocatable.Count)
			return &n, true
		}
	}
	return nil, false
}

// Fits reports whether newVolumes more volumes of the driver fit on the
// node, with the usage and limit it compared.
func (c *Counter) Fits(node string, newVolumes int) (bool, Usage, *int64, error) {
	u, err := c.Count(node)
	if err != nil {
		return false, u, nil, err
	}
	limit, err := c.Limit(node)
	if err != nil {
		return false, u, nil, err
	}
	return limit == nil || int64(u.Total()+newVolumes) <= *limit, u, limit, nil
}
