package provisioner

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// Config holds the behaviour switches of a Provisioner. Zero values are
// replaced by the defaults documented on each field (see Config.withDefaults).
type Config struct {
	// DriverName is the CSI driver's name as reported by GetPluginInfo. It is
	// the provisioner name StorageClasses refer to. Required.
	DriverName string
	// SupportsTopology is true when the driver advertises the
	// VOLUME_ACCESSIBILITY_CONSTRAINTS plugin capability. Without it no
	// accessibility requirements are sent and PVs get no nodeAffinity.
	SupportsTopology bool
	// SupportsSingleNodeMultiWriter is true when the driver advertises the
	// SINGLE_NODE_MULTI_WRITER controller capability; it selects the CSI access
	// modes used for ReadWriteOnce and ReadWriteOncePod.
	SupportsSingleNodeMultiWriter bool
	// SupportsClone is true when the driver advertises the CLONE_VOLUME
	// controller capability; without it claims cloning a claim are refused.
	SupportsClone bool
	// SupportsSnapshot is true when the driver advertises the
	// CREATE_DELETE_SNAPSHOT controller capability; without it claims
	// restoring a VolumeSnapshot are refused.
	SupportsSnapshot bool
	// SupportsModify is true when the driver advertises the MODIFY_VOLUME
	// controller capability; without it claims naming a
	// VolumeAttributesClass are refused.
	SupportsModify bool
	// SupportsAttach is true when the driver advertises the
	// PUBLISH_UNPUBLISH_VOLUME controller capability; the Controller then
	// watches VolumeAttachments and a PV's volume is not deleted while one
	// names the PV (Deps.Attachments), as upstream does.
	SupportsAttach bool
	// PreventVolumeModeConversion refuses a restore into another volume
	// mode than the snapshot's source had, unless its VolumeSnapshotContent
	// carries snapshot.storage.kubernetes.io/allow-volume-mode-change=true
	// (upstream's --prevent-volume-mode-conversion, default true there and
	// in csi-provisioner's flags; false here as Go's zero value).
	PreventVolumeModeConversion bool
	// IgnoreAttributesClasses ignores claims' spec.volumeAttributesClassName
	// (upstream's VolumeAttributesClass=false feature gate): no
	// mutable_parameters, no class on the PV.
	IgnoreAttributesClasses bool
	// StrictTopology restricts both requisite and preferred topology to the
	// selected node's segment for delayed binding.
	StrictTopology bool
	// ImmediateTopology sends all known segments of the driver as requisite
	// topology for immediate-binding claims of classes without allowedTopologies.
	ImmediateTopology bool
	// ExtraCreateMetadata adds the PVC name and namespace and the PV name to
	// CreateVolume parameters.
	ExtraCreateMetadata bool
	// ControllerPublishReadOnly marks a PV read-only (spec.csi.readOnly), so
	// that ControllerPublishVolume is called with readonly set, when its
	// claim's only access mode is ReadOnlyMany (the CreateVolume request's
	// single capability is MULTI_NODE_READER_ONLY), as upstream
	// external-provisioner's --controller-publish-readonly does.
	ControllerPublishReadOnly bool
	// DefaultFSType is the filesystem type used when the class does not set
	// csi.storage.k8s.io/fstype. Empty means none.
	DefaultFSType string
	// VolumeNamePrefix is the prefix of the CSI volume name. Default "pvc".
	VolumeNamePrefix string
	// VolumeNameUUIDLength truncates the PVC UID (dashes removed) in the CSI
	// volume name to this many characters. Negative or zero keeps the full UID.
	VolumeNameUUIDLength int
	// Timeout bounds every CSI call. Default 10s.
	Timeout time.Duration
	// FullSegmentHold is how long after the driver found no room in a
	// selected node's segment for a class (RESOURCE_EXHAUSTED, or a volume
	// placed out of the node's reach) delayed claims on nodes of that
	// segment go back to the scheduler without a CreateVolume. Default 1m.
	// See fullsegments.Holds.
	FullSegmentHold time.Duration
	// Identity names this provisioner instance in the
	// storage.kubernetes.io/csiProvisionerIdentity volume attribute of the
	// PVs it makes. Default, as upstream: <start time in ms since the
	// epoch>-<random number below 10000>-<DriverName>, with -<node name>
	// appended in node deployment.
	Identity string
	// Node, when set, makes this the instance of one node (node
	// deployment); nil: one provisioner for the whole cluster.
	Node *nodedeploy.Config
}

const (
	defaultVolumeNamePrefix = "pvc"
	defaultTimeout          = 10 * time.Second
	defaultFullSegmentHold  = time.Minute
)

func (c Config) withDefaults() Config {
	if c.VolumeNamePrefix == "" {
		c.VolumeNamePrefix = defaultVolumeNamePrefix
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	if c.FullSegmentHold <= 0 {
		c.FullSegmentHold = defaultFullSegmentHold
	}
	c.Node = c.Node.WithDefaults()
	if c.Identity == "" {
		c.Identity = fmt.Sprintf("%d-%d-%s", time.Now().UnixMilli(), rand.IntN(10000), c.DriverName)
		if c.Node != nil {
			c.Identity += "-" + c.Node.NodeName
		}
	}
	return c
}

func (c Config) validate() error {
	if c.DriverName == "" {
		return fmt.Errorf("driver name is required")
	}
	if c.Node != nil && c.Node.NodeName == "" {
		return fmt.Errorf("node deployment needs the node's name")
	}
	return nil
}
