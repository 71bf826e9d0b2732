package plugin

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

var _ fwk.EnqueueExtensions = &Plugin{}

// EventsToRegister implements fwk.EnqueueExtensions: the cluster events
// after which a pod this plugin rejected may fit, each with a queueing hint
// that skips what cannot concern the driver. A plugin without them is
// registered for every event of every resource, so that a pod it rejected
// would be retried after any change in the cluster, a kubelet's status
// update of any node included.
//
// What can lift each rejection (scheduler.Reason):
//   - a claim that did not exist (PreFilter): the claim's creation;
//   - CSIDriverNotRegistered, TopologyLabelMissing: the CSINode entry of
//     the driver, the node's labels;
//   - OutsideAllowedTopologies: the node's labels, the class created again;
//   - DataSourceUnreachable, VolumeNodeAffinityConflict: a claim bound, a
//     PV's node affinity;
//   - VolumeLimitExceeded: a pod with volumes leaving the node, an
//     attachment of the driver deleted, a claim of the driver bound or
//     deleted, the limit raised (CSINode, node allocatable);
//   - InsufficientCapacity: capacity published or refreshed, a claim of
//     the driver bound or deleted (its reservation ends);
//   - CSIDriverNotLive: the driver's heartbeat Lease, which is no framework
//     resource: followHeartbeats activates the pods waiting for a node when
//     its Lease is renewed.
//
// A reservation that expires has no event; kube-scheduler retries every
// unschedulable pod at least every 5 minutes (podMaxInUnschedulablePodsDuration),
// the reservations' default lifetime.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.PersistentVolumeClaim, ActionType: fwk.Add | fwk.Update | fwk.Delete}, QueueingHintFn: p.afterClaimChange},
		{Event: fwk.ClusterEvent{Resource: fwk.PersistentVolume, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.afterVolumeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable}},
		{Event: fwk.ClusterEvent{Resource: fwk.CSINode, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.afterCSINodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.CSIStorageCapacity, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.afterCapacityChange},
		{Event: fwk.ClusterEvent{Resource: fwk.StorageClass, ActionType: fwk.Add}, QueueingHintFn: p.afterClassAdd},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.afterPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.VolumeAttachment, ActionType: fwk.Delete}, QueueingHintFn: p.afterAttachmentDelete},
	}, nil
}

// hint returns Queue when ok, QueueSkip otherwise.
func hint(ok bool) fwk.QueueingHint {
	if ok {
		return fwk.Queue
	}
	return fwk.QueueSkip
}

// objects returns the event's object of type T: the new one, or the old
// one of a deletion (a tombstone unwrapped). An object of another type is
// an error, and the pod is queued.
func objects[T any](oldObj, newObj any) (T, error) {
	obj := newObj
	if obj == nil {
		obj = oldObj
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("%s: unexpected object %T in a cluster event", Name, obj)
	}
	return o, nil
}

// afterClaimChange queues the pod for its own claims, and for claims of
// the driver (bound or deleted, they end reservations and leave a node's
// attach count).
func (p *Plugin) afterClaimChange(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	claim, err := objects[*v1.PersistentVolumeClaim](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if claim.Namespace == pod.Namespace {
		for _, vol := range pod.Spec.Volumes {
			if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == claim.Name {
				return fwk.Queue, nil
			}
		}
	}
	if claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName != "" {
		if owned, _ := p.core.OwnsClass(*claim.Spec.StorageClassName); owned {
			return fwk.Queue, nil
		}
	}
	return hint(claim.Spec.VolumeName != "" && p.core.OwnsVolume(claim.Spec.VolumeName)), nil
}

// afterVolumeChange queues the pod for CSI volumes of the driver.
func (p *Plugin) afterVolumeChange(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	pv, err := objects[*v1.PersistentVolume](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return hint(pv.Spec.CSI != nil && pv.Spec.CSI.Driver == p.core.Driver()), nil
}

// afterCSINodeChange queues the pod when the driver's entry of a CSINode
// appears, changes (keys, attach limit) or goes. Before it queues the pod
// it drops the node's cached segment itself: the Core's own CSINode handler
// is another listener of the informer and may run after the pod's next
// cycle, which would then reject the node again on the old entry.
func (p *Plugin) afterCSINodeChange(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	now, err := objects[*storagev1.CSINode](nil, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	entry := driverEntry(now, p.core.Driver())
	changed := entry != nil
	if oldObj != nil {
		before, err := objects[*storagev1.CSINode](nil, oldObj)
		if err != nil {
			p.core.CSINodeChanged(now.Name)
			return fwk.Queue, err
		}
		changed = !apiequality.Semantic.DeepEqual(entry, driverEntry(before, p.core.Driver()))
	}
	if changed {
		p.core.CSINodeChanged(now.Name)
	}
	return hint(changed), nil
}

func driverEntry(n *storagev1.CSINode, driver string) *storagev1.CSINodeDriver {
	for i := range n.Spec.Drivers {
		if n.Spec.Drivers[i].Name == driver {
			return &n.Spec.Drivers[i]
		}
	}
	return nil
}

// afterCapacityChange queues the pod for capacity objects of the driver's
// classes, and of classes not known yet.
func (p *Plugin) afterCapacityChange(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	c, err := objects[*storagev1.CSIStorageCapacity](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	owned, known := p.core.OwnsClass(c.StorageClassName)
	return hint(owned || !known), nil
}

// afterClassAdd queues the pod for a new class of the driver.
func (p *Plugin) afterClassAdd(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	class, err := objects[*storagev1.StorageClass](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return hint(class.Provisioner == p.core.Driver()), nil
}

// afterPodDelete queues the pod when a pod that ran on a node with claims
// leaves it: attach slots may be free.
func (p *Plugin) afterPodDelete(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	gone, err := objects[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if gone.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	for _, vol := range gone.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil || vol.CSI != nil {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// afterAttachmentDelete queues the pod when an attachment of the driver
// is deleted.
func (p *Plugin) afterAttachmentDelete(_ klog.Logger, _ *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	va, err := objects[*storagev1.VolumeAttachment](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return hint(va.Spec.Attacher == p.core.Driver()), nil
}
