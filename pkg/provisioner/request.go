package provisioner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

// ErrInvalidClaim marks a claim the provisioner cannot serve as written
// (no size, impossible size range, unsupported data source or selector).
var ErrInvalidClaim = errors.New("invalid claim")

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

// capacityRange returns the claim's requested size range.
func capacityRange(claim *v1.PersistentVolumeClaim) (*csi.CapacityRange, error) {
	req, ok := claim.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return nil, fmt.Errorf("%w: claim requests no storage size", ErrInvalidClaim)
	}
	required := req.Value()
	if required <= 0 {
		return nil, fmt.Errorf("%w: requested size %s is not positive", ErrInvalidClaim, req.String())
	}
	r := &csi.CapacityRange{RequiredBytes: required}
	if lim, ok := claim.Spec.Resources.Limits[v1.ResourceStorage]; ok {
		if lim.Value() < required {
			return nil, fmt.Errorf("%w: storage limit %s is below the request %s", ErrInvalidClaim, lim.String(), req.String())
		}
		r.LimitBytes = lim.Value()
	}
	return r, nil
}

// volumeCapability returns the CSI capability for the claim's volume mode and
// access modes.
func volumeCapability(claim *v1.PersistentVolumeClaim, fsType string, mountOptions []string, singleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(claim.Spec.AccessModes, singleNodeMultiWriter)
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
	return capability, nil
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
	secrets map[secretKind]*v1.SecretReference
	// source is the claim's data source, nil for an empty volume.
	source *dataSource
	// attributesClass is the claim's VolumeAttributesClass, "" for none.
	attributesClass string
}

// setSource puts the data source's content into the CSI request.
func (r *createRequest) setSource() {
	if r.source != nil {
		r.csi.VolumeContentSource = r.source.content
	}
}

// buildCreateRequest validates the claim and class and assembles the
// CreateVolume request, without topology and provisioner secrets.
func (p *Provisioner) buildCreateRequest(opts controller.ProvisionOptions) (*createRequest, error) {
	claim, class := opts.PVC, opts.StorageClass
	if err := checkClaim(claim); err != nil {
		return nil, err
	}
	params, err := parseClassParameters(class.Parameters)
	if err != nil {
		return nil, err
	}
	capRange, err := capacityRange(claim)
	if err != nil {
		return nil, err
	}
	fsType := params.fsType
	if fsType == "" {
		fsType = p.cfg.DefaultFSType
	}
	if isBlock(claim) {
		fsType = ""
	}
	capability, err := volumeCapability(claim, fsType, class.MountOptions, p.cfg.SupportsSingleNodeMultiWriter)
	if err != nil {
		return nil, err
	}
	refs, err := secretRefs(params.secrets, templateVars{
		pvName:         opts.PVName,
		pvcName:        claim.Name,
		pvcNamespace:   claim.Namespace,
		pvcAnnotations: claim.Annotations,
	})
	if err != nil {
		return nil, err
	}
	var mutable map[string]string
	attributesClass := ""
	if !p.cfg.IgnoreAttributesClasses {
		if mutable, err = p.mutableParameters(claim); err != nil {
			return nil, err
		}
		attributesClass = attributesClassName(claim)
	}
	driverParams := params.driver
	if p.cfg.ExtraCreateMetadata {
		driverParams[paramPVCName] = claim.Name
		driverParams[paramPVCNamespace] = claim.Namespace
		driverParams[paramPVName] = opts.PVName
	}
	return &createRequest{
		csi: &csi.CreateVolumeRequest{
			Name:               volumeName(p.cfg.VolumeNamePrefix, claim.UID, p.cfg.VolumeNameUUIDLength),
			CapacityRange:      capRange,
			VolumeCapabilities: []*csi.VolumeCapability{capability},
			Parameters:         driverParams,
			MutableParameters:  mutable,
		},
		fsType:          fsType,
		secrets:         refs,
		attributesClass: attributesClass,
	}, nil
}
