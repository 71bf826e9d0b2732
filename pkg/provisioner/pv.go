package provisioner

import (
	"fmt"
	"maps"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// PV annotations that record the provisioner secret for DeleteVolume.
const (
	annDeletionSecretName      = "volume.kubernetes.io/provisioner-deletion-secret-name"
	annDeletionSecretNamespace = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
)

// PV annotations that record the controller-modify secret for the
// external-resizer's ControllerModifyVolume (upstream's names).
const (
	annModifySecretName      = "volume.kubernetes.io/controller-modify-secret-name"
	annModifySecretNamespace = "volume.kubernetes.io/controller-modify-secret-namespace"
)

// buildPV describes a created volume as a PersistentVolume of the volume's
// name (pvname.go). The library adds the claimRef, the class name, the
// provisioned-by annotation and the finalizer.
func (p *Provisioner) buildPV(opts controller.ProvisionOptions, req *createRequest, resp *csi.CreateVolumeResponse) (*v1.PersistentVolume, error) {
	vol := resp.GetVolume()
	if vol.GetVolumeId() == "" {
		return nil, fmt.Errorf("driver returned no volume ID for %q", req.csi.Name)
	}
	size := vol.GetCapacityBytes()
	required := req.csi.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = required
	}
	if size < required {
		return nil, fmt.Errorf("driver created volume %q with %d bytes, less than the %d bytes requested", vol.GetVolumeId(), size, required)
	}
	class, claim := opts.StorageClass, opts.PVC
	reclaim := v1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	source := &v1.CSIPersistentVolumeSource{
		Driver:           p.cfg.DriverName,
		VolumeHandle:     vol.GetVolumeId(),
		VolumeAttributes: p.volumeAttributes(vol),
		FSType:           req.fsType,
		ReadOnly:         p.cfg.ControllerPublishReadOnly && readerOnly(req.csi.GetVolumeCapabilities()),
	}
	source.ControllerPublishSecretRef = req.secrets[classparams.SecretControllerPublish]
	source.NodeStageSecretRef = req.secrets[classparams.SecretNodeStage]
	source.NodePublishSecretRef = req.secrets[classparams.SecretNodePublish]
	source.ControllerExpandSecretRef = req.secrets[classparams.SecretControllerExpand]
	source.NodeExpandSecretRef = req.secrets[classparams.SecretNodeExpand]

	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: req.csi.GetName()},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:                   claim.Spec.AccessModes,
			MountOptions:                  class.MountOptions,
			PersistentVolumeReclaimPolicy: reclaim,
			VolumeMode:                    claim.Spec.VolumeMode,
			Capacity: v1.ResourceList{
				v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: source},
		},
	}
	if p.cfg.SupportsTopology {
		pv.Spec.NodeAffinity = topology.NodeAffinity(vol.GetAccessibleTopology())
	}
	// As upstream, a PV without a provisioner secret records that with
	// empty annotations, so that its delete does not fall back to the
	// class's parameters (deletionSecretRef).
	pv.Annotations = map[string]string{annDeletionSecretName: "", annDeletionSecretNamespace: ""}
	if ref := req.secrets[secretProvisioner]; ref != nil {
		pv.Annotations[annDeletionSecretName] = ref.Name
		pv.Annotations[annDeletionSecretNamespace] = ref.Namespace
	}
	if ref := req.secrets[classparams.SecretControllerModify]; ref != nil {
		pv.Annotations[annModifySecretName] = ref.Name
		pv.Annotations[annModifySecretNamespace] = ref.Namespace
	}
	if req.attributesClass != "" {
		name := req.attributesClass
		pv.Spec.VolumeAttributesClassName = &name
	}
	p.cfg.Node.deployment().LabelVolume(pv)
	return pv, nil
}

// annProvisionerIdentity is upstream's volume attribute naming the
// provisioner instance that made a volume (Config.Identity). Nothing reads
// it back, here or upstream; drivers and tools may.
const annProvisionerIdentity = "storage.kubernetes.io/csiProvisionerIdentity"

// volumeAttributes is the PV's spec.csi.volumeAttributes: the provisioner's
// identity and the driver's volume context, which wins on a shared key (as
// upstream).
func (p *Provisioner) volumeAttributes(vol *csi.Volume) map[string]string {
	attrs := map[string]string{annProvisionerIdentity: p.cfg.Identity}
	maps.Copy(attrs, vol.GetVolumeContext())
	return attrs
}

// readerOnly reports whether caps is exactly one capability whose access
// mode is MULTI_NODE_READER_ONLY (a claim asking for ReadOnlyMany only).
func readerOnly(caps []*csi.VolumeCapability) bool {
	return len(caps) == 1 && caps[0].GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// describeRequirements says in an operator's words how the requirements of
// a claim were chosen.
// termsAsWrittenNote ends the decision of an immediate-binding claim whose
// class's allowedTopologies were sent as written (topology.Placement).
const termsAsWrittenNote = "no node of the driver is in a segment the StorageClass's allowedTopologies allow yet, so they were sent as written, as upstream external-provisioner sends them"

func describeRequirements(selectedNode string, reqs *csi.TopologyRequirement, strict bool) string {
	switch {
	case reqs == nil:
		return "no topology requirements"
	case selectedNode != "":
		mode := ""
		if strict {
			mode = ", strict topology"
		}
		return fmt.Sprintf("selected node %s, segment %s (%d allowed segment(s)%s)",
			selectedNode, segmentString(reqs.GetPreferred()), len(reqs.GetRequisite()), mode)
	default:
		return fmt.Sprintf("immediate binding, preferred segment %s of %d allowed",
			segmentString(reqs.GetPreferred()), len(reqs.GetRequisite()))
	}
}

// placedIn describes where the driver made the volume.
func placedIn(accessible []*csi.Topology) string {
	if len(accessible) == 0 {
		return "; volume accessible from every node"
	}
	return "; volume placed in " + segmentsString(accessible)
}

func segmentString(ts []*csi.Topology) string {
	if len(ts) == 0 {
		return "(none)"
	}
	return topology.Segment(ts[0].GetSegments()).String()
}

func segmentsString(ts []*csi.Topology) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, topology.Segment(t.GetSegments()).String())
	}
	return strings.Join(parts, " | ")
}
