package provisioner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
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
//   - Its Node and CSINode informers hold only NodeName; claims, PVs and
//     classes stay cluster-wide (no field selects an annotation).
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

// ownsVolume reports whether a PV's volume is on this node: its node
// affinity admits the node's topology (a PV without node affinity is
// reachable from everywhere, as upstream has it). Without node deployment
// every PV is.
func (n *NodeDeployment) ownsVolume(obj any) bool {
	if n == nil {
		return true
	}
	pv, ok := obj.(*v1.PersistentVolume)
	return ok && accessibleFrom(affinityTopologies(pv), &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: n.Topology}})
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

// managedByPrefix is the value of csi.storage.k8s.io/managed-by on the
// capacity objects of the central provisioner; a node's instance appends
// "-<node>".
const managedByPrefix = "csi-topology-provisioner"

// ManagedBy returns the csi.storage.k8s.io/managed-by label value of the
// capacity objects of a node's instance ("" for the central provisioner):
// csi-topology-provisioner-<node>, or a hash of the node name when that
// would be longer than a label value may be.
func ManagedBy(node string) string {
	if node == "" {
		return managedByPrefix
	}
	v := managedByPrefix + "-" + node
	if len(v) <= validation.LabelValueMaxLength {
		return v
	}
	sum := sha256.Sum256([]byte(node))
	return managedByPrefix + "-" + hex.EncodeToString(sum[:])[:validation.LabelValueMaxLength-len(managedByPrefix)-1]
}

// errDriverNotLive: the node's driver does not answer, so a claim selected
// for the node is handed back to the scheduler.
type errDriverNotLive struct {
	driver, node, status string
}

func (e *errDriverNotLive) Error() string {
	return fmt.Sprintf("CSI driver %q on node %q is not answering: %s", e.driver, e.node, e.status)
}

// driverLive reports whether this node's driver answers; always true
// without node deployment or without a status source.
func (p *Provisioner) driverLive() error {
	if p.cfg.Node == nil || p.deps.DriverStatus == nil {
		return nil
	}
	if ok, why := p.deps.DriverStatus(); !ok {
		return &errDriverNotLive{driver: p.cfg.DriverName, node: p.cfg.Node.NodeName, status: why}
	}
	return nil
}

// ShouldProvision implements controller.Qualifier: with node deployment a
// claim is provisioned only by the instance of its selected node (the
// library's workers read the claim again when they get to it, and by then
// it may have moved to another node).
func (p *Provisioner) ShouldProvision(_ context.Context, claim *v1.PersistentVolumeClaim) bool {
	return p.cfg.Node.ownsClaim(claim)
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

// trimForCache is TrimForCache for a node's instance: besides, a claim
// that is another node's (selected for it, or bound without being this
// node's) is cached as a stub with what the instance's consumers read of
// it: the selected node, the class, the bound volume, the data source (the
// source protection counts pending clones cluster-wide), the finalizers
// and the deletion mark. Every node's instance caches every claim of the
// cluster, so the stub is what a claim costs it. An update that selects
// this node brings the whole claim again.
func (n *NodeDeployment) trimForCache(obj any) (any, error) {
	obj, err := TrimForCache(obj)
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
