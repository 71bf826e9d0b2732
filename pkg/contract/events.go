package contract

// Reasons of the Events the provisioner posts on claims: the provisioning
// library's (as upstream external-provisioner's) and ours.
const (
	// ReasonProvisioning: the library is about to provision (the sidecar
	// drops this Event, docs/design.md "Events").
	ReasonProvisioning = "Provisioning"
	// ReasonProvisioningSucceeded: a volume and its PV were made.
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
	// ReasonProvisioningFailed: an attempt failed; the Event's annotations
	// say why as typed values (AnnHandBack, AnnRefusal, AnnDriverCode).
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonInFlightVolumeDeleted: a deleted claim's volume, made before any
	// PV, was deleted and the in-flight record removed.
	ReasonInFlightVolumeDeleted = "InFlightVolumeDeleted"
	// ReasonInFlightVolumeAbandoned: the in-flight record was removed
	// without knowing that the volume is gone.
	ReasonInFlightVolumeAbandoned = "InFlightVolumeAbandoned"
	// ReasonVolumeNameTaken: the PV name of a new volume was held by
	// another volume's PV, or by another claim's PV of the same volume.
	ReasonVolumeNameTaken = "VolumeNameTaken"
)

// Annotations on the provisioner's Events on a claim. The message says the
// same in words for people; readers (explain) key on these.
const (
	// AnnHandBack is on a ProvisioningFailed Event when the claim was
	// handed back to the scheduler (its selected-node annotation removed);
	// the value is a HandBack.
	AnnHandBack = "csi-topology-provisioner.io/hand-back"
	// AnnRefusal is on a ProvisioningFailed Event when the provisioner
	// refused the claim's class or secret before calling the driver; the
	// value is a Refusal.
	AnnRefusal = "csi-topology-provisioner.io/refusal"
	// AnnSecret is on a ProvisioningFailed Event of RefusalSecretNotFound:
	// the "<namespace>/<name>" of the secret that does not exist.
	AnnSecret = "csi-topology-provisioner.io/secret"
	// AnnDriverCode is on a ProvisioningFailed Event when the driver's
	// CreateVolume failed: the gRPC code's name ("InvalidArgument",
	// "ResourceExhausted", ...).
	AnnDriverCode = "csi-topology-provisioner.io/driver-code"
	// AnnPlacement is on a ProvisioningSucceeded Event: the topology
	// decision that the message ends with (selected node or immediate
	// binding, the segment asked first, where the driver put the volume).
	AnnPlacement = "csi-topology-provisioner.io/placement"
)

// HandBack is why the provisioner handed a claim back to the scheduler.
// The values are also those of the reason label of the metric
// csi_topology_provisioner_reschedules_total.
type HandBack string

// The hand-back reasons.
const (
	// HandBackNoCapacity: the driver returned RESOURCE_EXHAUSTED for the
	// selected node's segment, or the segment is held full for the class.
	HandBackNoCapacity HandBack = "NoCapacity"
	// HandBackNodeIneligible: the selected node can never host the volume
	// (gone, no CSINode entry or driver, topology label missing, outside the
	// class's allowedTopologies).
	HandBackNodeIneligible HandBack = "NodeIneligible"
	// HandBackVolumeNotAccessible: the driver made the volume in a segment
	// the selected node cannot reach; it was deleted again.
	HandBackVolumeNotAccessible HandBack = "VolumeNotAccessible"
	// HandBackSourceUnreachable: the selected node cannot reach the claim's
	// data source.
	HandBackSourceUnreachable HandBack = "SourceUnreachable"
	// HandBackDriverNotLive: node deployment, the driver on the selected
	// node (the instance's own) does not answer.
	HandBackDriverNotLive HandBack = "DriverNotLive"
)

// Refusal is why the provisioner refused a claim before calling the
// driver, when no node would do better: only the class or a secret can.
type Refusal string

// The refusals.
const (
	// RefusalInvalidParameter: a StorageClass parameter is invalid (an
	// unknown csi.storage.k8s.io/ key, a key set twice, ...).
	RefusalInvalidParameter Refusal = "InvalidParameter"
	// RefusalInvalidSecretTemplate: a secret name or namespace template of
	// the class uses a variable it may not.
	RefusalInvalidSecretTemplate Refusal = "InvalidSecretTemplate"
	// RefusalSecretNotFound: a secret the class names does not exist
	// (AnnSecret names it).
	RefusalSecretNotFound Refusal = "SecretNotFound"
)
