package provisioner

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

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
	return claimFor(p.cfg.DriverName, claim) && p.cfg.Node.OwnsClaim(claim)
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
	if p.cfg.Node == nil || p.records == nil || !inflight.HasFinalizer(claim) || p.records.LastRequest(claim.UID) != nil {
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

// nodeMayTake is the check of the claimer of immediate-binding claims
// (nodedeploy.ClaimerConfig.Check): it says why node cannot take the claim
// now, or "": the driver must answer, the node must satisfy the class's
// allowedTopologies and reach the claim's data source, and (capacity) its
// segment must have room.
func (p *Provisioner) nodeMayTake(capacity bool) func(context.Context, *v1.PersistentVolumeClaim, *storagev1.StorageClass, *v1.Node) string {
	return func(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass, node *v1.Node) string {
		if err := p.driverLive(); err != nil {
			return err.Error()
		}
		opts := controller.ProvisionOptions{StorageClass: class, PVC: claim, SelectedNode: node}
		req, err := p.buildCreateRequest(ctx, opts)
		if err != nil {
			// Taken anyway: the provision fails the same way, and its Event
			// tells the user (no instance would otherwise).
			return ""
		}
		if p.cfg.SupportsTopology {
			source, err := p.sources.Resolve(ctx, claim, class)
			if err != nil {
				return ""
			}
			if _, err := p.requirements(opts, node.Name, source); err != nil {
				return err.Error()
			}
		}
		if !capacity {
			return ""
		}
		return p.roomOnNode(ctx, claim, req)
	}
}

// roomOnNode asks the driver for the room in the node's segment: why the
// claim does not fit, or "" (also when the driver cannot tell).
func (p *Provisioner) roomOnNode(ctx context.Context, claim *v1.PersistentVolumeClaim, req *createRequest) string {
	q := claim.Spec.Resources.Requests[v1.ResourceStorage]
	size := q.Value()
	if size <= 0 {
		return ""
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := p.deps.CSI.GetCapacity(callCtx, &csi.GetCapacityRequest{
		VolumeCapabilities: req.csi.GetVolumeCapabilities(), Parameters: req.csi.GetParameters(),
		AccessibleTopology: &csi.Topology{Segments: p.cfg.Node.Topology},
	})
	if err != nil {
		// As upstream: a failed check does not stop the attempt.
		klog.FromContext(ctx).V(3).Info("Capacity check failed, taking the claim anyway", "err", err)
		return ""
	}
	if resp.GetAvailableCapacity() < size {
		return fmt.Sprintf("%d bytes free on this node, the claim asks for %d", resp.GetAvailableCapacity(), size)
	}
	return ""
}
