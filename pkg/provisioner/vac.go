package provisioner

import (
	"errors"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrAttributesClassRefused marks a claim whose VolumeAttributesClass
// cannot be applied: the API has none, the class is missing or of another
// driver, or the driver cannot take mutable parameters.
var ErrAttributesClassRefused = errors.New("VolumeAttributesClass refused")

// attributesClassName is the claim's VolumeAttributesClass, "" for none.
func attributesClassName(claim *v1.PersistentVolumeClaim) string {
	if n := claim.Spec.VolumeAttributesClassName; n != nil {
		return *n
	}
	return ""
}

// mutableParameters returns the parameters of the claim's
// VolumeAttributesClass, which CreateVolume gets as mutable_parameters
// (nil without a class). A claim whose class cannot be honoured is refused:
// provisioning without the class's parameters would give the user another
// volume than the one asked for.
func (p *Provisioner) mutableParameters(claim *v1.PersistentVolumeClaim) (map[string]string, error) {
	name := attributesClassName(claim)
	if name == "" {
		return nil, nil
	}
	if p.deps.AttributesClasses == nil {
		return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but VolumeAttributesClasses are switched off in this csi-provisioner (--feature-gates=VolumeAttributesClass=false)",
			ErrAttributesClassRefused, name)
	}
	if api := p.deps.AttributesClassAPI; api != nil && !api.Ready() {
		api.Poke()
		return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but the API does not serve storage.k8s.io/v1 VolumeAttributesClass yet (Kubernetes 1.34 and later), or csi-provisioner may not list and watch volumeattributesclasses (%s); retried, and picked up without a restart once it is",
			ErrAttributesClassRefused, name, api.State())
	}
	if !p.cfg.SupportsModify {
		return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but CSI driver %q lacks the MODIFY_VOLUME controller capability, so it cannot take the class's parameters",
			ErrAttributesClassRefused, name, p.cfg.DriverName)
	}
	vac, err := p.deps.AttributesClasses.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: VolumeAttributesClass %q does not exist", ErrAttributesClassRefused, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading VolumeAttributesClass %q: %w", name, err)
	}
	if vac.DriverName != p.cfg.DriverName {
		return nil, fmt.Errorf("%w: VolumeAttributesClass %q is for CSI driver %q, not %q", ErrAttributesClassRefused, name, vac.DriverName, p.cfg.DriverName)
	}
	return maps.Clone(vac.Parameters), nil
}
