package provisioner

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// NodeDeployment makes a Provisioner the instance of one node: it runs
// beside a node-local driver on that node (upstream external-provisioner's
// --node-deployment) and handles only what concerns the node.
//
//   - It provisions claims whose volume.kubernetes.io/selected-node is
//     NodeName: delayed-binding claims the scheduler placed there, and
//     immediate-binding claims the instance took (ImmediateBinding, see
//     nodeClaimer).
//   - It deletes only the volumes of PVs whose node affinity admits Topology.
//   - Its Node and CSINode informers hold only NodeName; claims and PVs
//     are the node's own with LabelSelection, else cluster-wide (no field
//     selects an annotation); classes are cluster-wide.
//   - It elects no leader: every node's instance runs.
//
// The zero value of each duration is replaced by upstream's default.
type NodeDeployment struct {
	// NodeName is the node this instance runs on ($NODE_NAME).
	NodeName string
	// Topology is the node's accessible topology as its driver reports it
	// (NodeGetInfo): a PV whose node affinity it satisfies is this node's.
	Topology map[string]string
	// ImmediateBinding: instances race for immediate-binding claims
	// (upstream's --node-deployment-immediate-binding).
	ImmediateBinding bool
	// BaseDelay and MaxDelay bound the wait before an instance tries to
	// take an immediate-binding claim: random in [0, BaseDelay] at first,
	// doubling after each lost race up to MaxDelay. Defaults 20s and 1m.
	BaseDelay, MaxDelay time.Duration
	// LabelSelection: the instance lists and watches only the claims and
	// PVs labelled with its node (and the driver's pool of unselected
	// immediate-binding claims), selected by the API server
	// (--node-deployment-selection=label, nodeselect.go); csi-node-router
	// must run. Without it every claim and PV of the cluster is watched.
	LabelSelection bool

	// node is the node as a PV's node affinity sees it (name and
	// Topology as labels), for the selector terms ownsVolume does not
	// match itself; set by withDefaults.
	node *v1.Node
}

func (n *NodeDeployment) withDefaults() *NodeDeployment {
	if n == nil {
		return nil
	}
	c := *n
	if c.BaseDelay <= 0 {
		c.BaseDelay = 20 * time.Second
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = time.Minute
	}
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = c.BaseDelay
	}
	c.node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.NodeName, Labels: c.Topology}}
	return &c
}

// ownsClaim reports whether a claim is this node's to provision: its
// selected node is NodeName. Without node deployment every claim is.
func (n *NodeDeployment) ownsClaim(obj any) bool {
	if n == nil {
		return true
	}
	c, ok := obj.(*v1.PersistentVolumeClaim)
	return ok && c.Annotations[annSelectedNode] == n.NodeName
}

// ownsVolume reports whether a PV's volume is on this node: its required
// node affinity admits the node's topology (a PV without one is reachable
// from everywhere, as upstream has it). Without node deployment every PV
// is. It runs for every PV event of the cluster, so the usual expressions
// are matched here without allocating; other terms go to the scheduler's
// own matcher.
func (n *NodeDeployment) ownsVolume(obj any) bool {
	if n == nil {
		return true
	}
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return false
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	for i := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		if n.admits(&pv.Spec.NodeAffinity.Required.NodeSelectorTerms[i]) {
			return true
		}
	}
	return false
}

// admits reports whether one node selector term (expressions ANDed) admits
// the node; a term without requirements admits nothing, as in
// kube-scheduler.
func (n *NodeDeployment) admits(t *v1.NodeSelectorTerm) bool {
	if len(t.MatchFields) > 0 {
		return n.admitsSlowly(t)
	}
	if len(t.MatchExpressions) == 0 {
		return false
	}
	for _, e := range t.MatchExpressions {
		v, has := n.Topology[e.Key]
		switch e.Operator {
		case v1.NodeSelectorOpIn:
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case v1.NodeSelectorOpNotIn:
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case v1.NodeSelectorOpExists:
			if !has {
				return false
			}
		case v1.NodeSelectorOpDoesNotExist:
			if has {
				return false
			}
		default: // Gt, Lt
			return n.admitsSlowly(t)
		}
	}
	return true
}

func (n *NodeDeployment) admitsSlowly(t *v1.NodeSelectorTerm) bool {
	ok, err := corev1helpers.MatchNodeSelectorTerms(n.node, &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{*t}})
	return err == nil && ok
}

// scoped wraps the handlers given to the library so that it sees only the
// objects in scope: an update that moves an object out of scope reaches it
// as a deletion, one that moves it in as an addition.
func scoped(h cache.ResourceEventHandler, inScope func(any) bool) cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{FilterFunc: func(obj any) bool {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		return inScope(obj)
	}, Handler: h}
}

// nodeFieldSelector selects the one object named after the node (its Node
// and its CSINode).
func (n *NodeDeployment) nodeFieldSelector(opts *metav1.ListOptions) {
	opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", n.NodeName).String()
}

// driverNotLiveError: the node's driver does not answer, so a claim selected
// for the node is handed back to the scheduler.
type driverNotLiveError struct {
	driver, node, status string
}

func (e *driverNotLiveError) Error() string {
	return fmt.Sprintf("CSI driver %q on node %q is not answering: %s", e.driver, e.node, e.status)
}

// driverLive reports whether this node's driver answers; always true
// without node deployment or without a status source.
func (p *Provisioner) driverLive() error {
	if p.cfg.Node == nil || p.deps.DriverStatus == nil {
		return nil
	}
	if ok, why := p.deps.DriverStatus(); !ok {
		return &driverNotLiveError{driver: p.cfg.DriverName, node: p.cfg.Node.NodeName, status: why}
	}
	return nil
}

// ShouldProvision implements controller.Qualifier. A claim is provisioned
// only when it waits for this driver, as upstream decides it: its
// storage-provisioner annotation names the driver, or
// kube-controller-manager marked it as migrated to the driver (claimFor);
// the library would also take a claim annotated with the in-tree plugin's
// name (one of its provisioner names under CSI migration) that is not
// migrated. With node deployment a claim is provisioned only by the
// instance of its selected node (the library's workers read the claim again
// when they get to it, and by then it may have moved to another node).
func (p *Provisioner) ShouldProvision(_ context.Context, claim *v1.PersistentVolumeClaim) bool {
	return claimFor(p.cfg.DriverName, claim) && p.cfg.Node.ownsClaim(claim)
}

// beforeHandBack runs before a node deployment's instance hands a claim
// back to the scheduler. The claim's in-flight record then leaves with the
// selected node (guardClaims), so no volume of the claim may remain on this
// node. This process deletes the volumes it knows of before it reschedules
// (fail); a claim that carries the record although this process never
// asked for its volume was asked for by an earlier process on this node,
// whose volume may exist: it is looked up by name and deleted first. While
// that cannot be done (the driver does not answer), the claim stays here
// and is retried.
func (p *Provisioner) beforeHandBack(ctx context.Context, opts controller.ProvisionOptions, err error) (controller.ProvisioningState, error) {
	claim := opts.PVC
	if p.cfg.Node == nil || p.records == nil || !HasInFlightFinalizer(claim) || p.records.lastRequest(claim.UID) != nil {
		return controller.ProvisioningReschedule, err
	}
	if lerr := p.driverLive(); lerr != nil {
		return controller.ProvisioningInBackground, fmt.Errorf("%w; not handing the claim back yet: a volume of an earlier attempt on this node may exist and cannot be deleted while the driver does not answer", err)
	}
	outcome, detail, cerr := p.clearVolume(ctx, claim, opts.StorageClass)
	if cerr != nil {
		return controller.ProvisioningInBackground, fmt.Errorf("%w; not handing the claim back yet: looking up a volume of an earlier attempt on this node failed: %v", err, cerr)
	}
	klog.FromContext(ctx).V(2).Info("Checked for a volume of an earlier attempt before handing the claim back", "outcome", outcome, "detail", detail)
	return controller.ProvisioningReschedule, err
}

// trimForCache is TrimForCache for a node's instance: besides, the claims
// and PVs of other nodes are cached as stubs with what the instance's
// consumers read of them. Every node's instance caches every claim and PV
// of the cluster, so the stubs are what they cost it.
//
//   - A claim selected for another node, or bound without being this
//     node's, keeps the selected node, the class, the bound volume, the
//     data source (the source protection counts pending clones
//     cluster-wide), the finalizers and the deletion mark. An update that
//     selects this node brings the whole claim again.
//   - A PV whose node affinity does not admit this node keeps its driver
//     and handle, claim reference, class, reclaim policy, volume mode,
//     node affinity, phase, finalizers and deletion mark (what a clone or
//     restore reads of its source's PV).
func (n *NodeDeployment) trimForCache(obj any) (any, error) {
	obj, err := TrimForCache(obj)
	if pv, ok := obj.(*v1.PersistentVolume); ok && err == nil && !n.ownsVolume(pv) {
		return pvStub(pv), nil
	}
	c, ok := obj.(*v1.PersistentVolumeClaim)
	if err != nil || !ok {
		return obj, err
	}
	selected := c.Annotations[annSelectedNode]
	if selected == n.NodeName || (selected == "" && c.Spec.VolumeName == "") {
		return c, nil
	}
	stub := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion,
			DeletionTimestamp: c.DeletionTimestamp, Finalizers: c.Finalizers},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: c.Spec.StorageClassName, VolumeName: c.Spec.VolumeName,
			DataSource: c.Spec.DataSource, DataSourceRef: c.Spec.DataSourceRef},
		Status: v1.PersistentVolumeClaimStatus{Phase: c.Status.Phase},
	}
	if selected != "" {
		stub.Annotations = map[string]string{annSelectedNode: selected}
	}
	return stub, nil
}

func pvStub(pv *v1.PersistentVolume) *v1.PersistentVolume {
	stub := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion,
			DeletionTimestamp: pv.DeletionTimestamp, Finalizers: pv.Finalizers},
		Spec: v1.PersistentVolumeSpec{ClaimRef: pv.Spec.ClaimRef, StorageClassName: pv.Spec.StorageClassName,
			PersistentVolumeReclaimPolicy: pv.Spec.PersistentVolumeReclaimPolicy, VolumeMode: pv.Spec.VolumeMode,
			NodeAffinity: pv.Spec.NodeAffinity},
		Status: v1.PersistentVolumeStatus{Phase: pv.Status.Phase},
	}
	if pv.Spec.CSI != nil {
		stub.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: pv.Spec.CSI.Driver, VolumeHandle: pv.Spec.CSI.VolumeHandle}
	}
	return stub
}
