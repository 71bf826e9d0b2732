package provisioner

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// RescheduleReason says why a claim was handed back to the scheduler: the
// value of its ProvisioningFailed Event's contract.AnnHandBack annotation.
type RescheduleReason = contract.HandBack

// Reasons for a reschedule.
const (
	// RescheduleNoCapacity: the driver returned RESOURCE_EXHAUSTED for the
	// selected node's segment.
	RescheduleNoCapacity = contract.HandBackNoCapacity
	// RescheduleNodeIneligible: the selected node can never host the volume
	// (gone, no CSINode entry or driver, topology label missing, outside the
	// class's allowedTopologies).
	RescheduleNodeIneligible = contract.HandBackNodeIneligible
	// RescheduleVolumeNotAccessible: the driver made the volume in a segment
	// the selected node cannot reach; it was deleted again.
	RescheduleVolumeNotAccessible = contract.HandBackVolumeNotAccessible
	// RescheduleSourceUnreachable: the selected node cannot reach the
	// claim's data source (the volume a clone copies or a snapshot was taken
	// of).
	RescheduleSourceUnreachable = contract.HandBackSourceUnreachable
	// RescheduleDriverNotLive: node deployment, the driver on the selected
	// node (this instance's) does not answer.
	RescheduleDriverNotLive = contract.HandBackDriverNotLive
)

// createVolumeState maps a CreateVolume error onto the library's
// ProvisioningState.
//
//   - RESOURCE_EXHAUSTED with a selected node: Reschedule, the scheduler picks
//     another node.
//   - DEADLINE_EXCEEDED, UNAVAILABLE, CANCELED, ABORTED: InBackground, the
//     driver may still be creating the volume; the claim is retried with the
//     same volume name and CreateVolume is idempotent.
//   - everything else: Finished, a final error reported in an Event.
func createVolumeState(err error, delayed bool) (controller.ProvisioningState, RescheduleReason) {
	switch status.Code(err) {
	case codes.ResourceExhausted:
		if delayed {
			return controller.ProvisioningReschedule, RescheduleNoCapacity
		}
		return controller.ProvisioningFinished, ""
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Aborted:
		return controller.ProvisioningInBackground, ""
	default:
		return controller.ProvisioningFinished, ""
	}
}

// requirementsState maps an error from topology requirement generation onto
// a ProvisioningState: a node that can never work sends the claim back to the
// scheduler, anything else (a configuration error) is final.
func requirementsState(err error, delayed bool) (controller.ProvisioningState, RescheduleReason) {
	var ne *topology.NodeError
	if delayed && errors.As(err, &ne) && ne.Reason == topology.SourceUnreachable {
		return controller.ProvisioningReschedule, RescheduleSourceUnreachable
	}
	if delayed && errors.Is(err, topology.ErrNodeIneligible) {
		return controller.ProvisioningReschedule, RescheduleNodeIneligible
	}
	return controller.ProvisioningFinished, ""
}
