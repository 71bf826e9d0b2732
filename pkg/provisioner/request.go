package provisioner

import (
	"context"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/datasource"
)

// ErrInvalidClaim marks a claim the provisioner cannot serve as written
// (no size, impossible size range, unsupported data source or selector).
// It is datasource.ErrInvalidClaim, which the data-source checks wrap.
var ErrInvalidClaim = datasource.ErrInvalidClaim

// ErrInvalidParameter marks a StorageClass parameter error: a configuration
// error that retrying cannot fix until the class is corrected.
var ErrInvalidParameter = classparams.ErrInvalidParameter

// ErrSecretTemplate marks a StorageClass secret template that cannot be
// resolved for a claim (unknown variable, missing annotation, invalid
// result).
var ErrSecretTemplate = classparams.ErrSecretTemplate

// secretProvisioner is the kind of the class's secret that the provisioner
// itself passes to CreateVolume and DeleteVolume.
const secretProvisioner = classparams.SecretProvisioner

// volumeName returns the deterministic CSI volume name of a claim:
// <prefix>-<PVC UID>, the UID truncated (dashes removed) when uuidLength > 0.
// A retry after a crash or timeout therefore asks for the same volume.
func volumeName(prefix string, uid types.UID, uuidLength int) string {
	id := string(uid)
	if uuidLength > 0 {
		id = strings.ReplaceAll(id, "-", "")
		if uuidLength < len(id) {
			id = id[:uuidLength]
		}
	}
	return prefix + "-" + id
}

// capacityRange returns the claim's requested size range: its storage
// request as the required bytes. A storage limit on the claim is not sent
// (no limit_bytes), as upstream: the driver may make the volume larger.
func capacityRange(claim *v1.PersistentVolumeClaim) (*csi.CapacityRange, error) {
	req, ok := claim.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return nil, fmt.Errorf("%w: claim requests no storage size", ErrInvalidClaim)
	}
	required := req.Value()
	if required <= 0 {
		return nil, fmt.Errorf("%w: requested size %s is not positive", ErrInvalidClaim, req.String())
	}
	return &csi.CapacityRange{RequiredBytes: required}, nil
}

// volumeCapabilities returns one CSI capability per access mode of the
// claim, as upstream: each mode is mapped on its own (ReadWriteOnce to
// SINGLE_NODE_WRITER, or SINGLE_NODE_MULTI_WRITER when the driver has that
// capability; ReadWriteOncePod to SINGLE_NODE_WRITER, or
// SINGLE_NODE_SINGLE_WRITER; ReadOnlyMany to MULTI_NODE_READER_ONLY;
// ReadWriteMany to MULTI_NODE_MULTI_WRITER), so a claim asking for
// ReadWriteOnce and ReadOnlyMany gets two capabilities.
func volumeCapabilities(claim *v1.PersistentVolumeClaim, fsType string, mountOptions []string, singleNodeMultiWriter bool) ([]*csi.VolumeCapability, error) {
	caps := make([]*csi.VolumeCapability, 0, len(claim.Spec.AccessModes))
	for _, m := range claim.Spec.AccessModes {
		mode, err := accessmodes.ToCSIAccessMode([]v1.PersistentVolumeAccessMode{m}, singleNodeMultiWriter)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidClaim, err)
		}
		capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
		if isBlock(claim) {
			capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		} else {
			capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
				FsType:     fsType,
				MountFlags: mountOptions,
			}}
		}
		caps = append(caps, capability)
	}
	return caps, nil
}

func isBlock(claim *v1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == v1.PersistentVolumeBlock
}

// checkClaim rejects claim features this provisioner does not implement.
func checkClaim(claim *v1.PersistentVolumeClaim) error {
	if claim.Spec.Selector != nil {
		return fmt.Errorf("%w: a claim with a label selector cannot be dynamically provisioned", ErrInvalidClaim)
	}
	return nil
}

// createRequest is everything Provision prepares before calling the driver.
type createRequest struct {
	csi     *csi.CreateVolumeRequest
	fsType  string
	secrets map[classparams.SecretKind]*v1.SecretReference
	// source is the claim's data source, nil for an empty volume.
	source *datasource.Source
	// attributesClass is the claim's VolumeAttributesClass, "" for none.
	attributesClass string
	// deprecated are the deprecated class parameters the request honours.
	deprecated []classparams.DeprecatedKey
}

// warnDeprecated logs each deprecated class parameter a request honours,
// as upstream warns at every provision.
func (r *createRequest) warnDeprecated(logger klog.Logger) {
	for _, d := range r.deprecated {
		logger.Info("StorageClass uses a deprecated parameter", "key", d.Key, "use", d.Use)
	}
}

// setSource puts the data source's content into the CSI request.
func (r *createRequest) setSource() {
	if r.source != nil {
		r.csi.VolumeContentSource = r.source.Content
	}
}

// buildCreateRequest validates the claim and class and assembles the
// CreateVolume request, without topology and provisioner secrets.
func (p *Provisioner) buildCreateRequest(ctx context.Context, opts controller.ProvisionOptions) (*createRequest, error) {
	claim, class := opts.PVC, opts.StorageClass
	if err := checkClaim(claim); err != nil {
		return nil, err
	}
	params, err := classparams.Parse(class.Parameters)
	if err != nil {
		return nil, err
	}
	capRange, err := capacityRange(claim)
	if err != nil {
		return nil, err
	}
	fsType := params.FSType
	if fsType == "" {
		fsType = p.cfg.DefaultFSType
	}
	if isBlock(claim) {
		fsType = ""
	}
	capabilities, err := volumeCapabilities(claim, fsType, class.MountOptions, p.cfg.SupportsSingleNodeMultiWriter)
	if err != nil {
		return nil, err
	}
	// The PV has the volume's name, as upstream (pvname.go), whatever
	// opts.PVName says.
	name := p.pvName(claim)
	refs, err := params.Secrets(classparams.TemplateVars{
		PVName:         name,
		PVCName:        claim.Name,
		PVCNamespace:   claim.Namespace,
		PVCAnnotations: claim.Annotations,
	})
	if err != nil {
		return nil, err
	}
	var mutable map[string]string
	attributesClass := ""
	if !p.cfg.IgnoreAttributesClasses {
		if mutable, err = p.mutableParameters(ctx, claim); err != nil {
			return nil, err
		}
		attributesClass = attributesClassName(claim)
	}
	driverParams := params.Driver
	if p.cfg.ExtraCreateMetadata {
		driverParams[classparams.PVCNameKey] = claim.Name
		driverParams[classparams.PVCNamespaceKey] = claim.Namespace
		driverParams[classparams.PVNameKey] = name
	}
	return &createRequest{
		csi: &csi.CreateVolumeRequest{
			Name:               name,
			CapacityRange:      capRange,
			VolumeCapabilities: capabilities,
			Parameters:         driverParams,
			MutableParameters:  mutable,
		},
		fsType:          fsType,
		secrets:         refs,
		attributesClass: attributesClass,
		deprecated:      params.Deprecated,
	}, nil
}
