package provisioner

import (
	"context"
	"errors"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
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
func (p *Provisioner) mutableParameters(ctx context.Context, claim *v1.PersistentVolumeClaim) (map[string]string, error) {
	name := attributesClassName(claim)
	if name == "" {
		return nil, nil
	}
	if p.deps.Sources.AttributesClasses == nil {
		return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but VolumeAttributesClasses are switched off in this csi-provisioner (--feature-gates=VolumeAttributesClass=false)",
			ErrAttributesClassRefused, name)
	}
	if !p.cfg.SupportsModify {
		return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but CSI driver %q lacks the MODIFY_VOLUME controller capability, so it cannot take the class's parameters",
			ErrAttributesClassRefused, name, p.cfg.DriverName)
	}
	vac, err := p.attributesClass(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: VolumeAttributesClass %q does not exist", ErrAttributesClassRefused, name)
	}
	if err != nil {
		return nil, err
	}
	if vac.DriverName != p.cfg.DriverName {
		return nil, fmt.Errorf("%w: VolumeAttributesClass %q is for CSI driver %q, not %q", ErrAttributesClassRefused, name, vac.DriverName, p.cfg.DriverName)
	}
	return maps.Clone(vac.Parameters), nil
}

// attributesClass reads a VolumeAttributesClass: from the informer once it
// has synced; with a GET while RBAC refuses to let the classes be listed
// and watched (upstream's way: its rbac.yaml grants nothing on them, and
// its users add get); else the claim waits for the API.
func (p *Provisioner) attributesClass(ctx context.Context, name string) (*storagev1.VolumeAttributesClass, error) {
	api := p.deps.Sources.AttributesClassAPI
	switch {
	case api == nil || api.Ready():
		vac, err := p.deps.Sources.AttributesClasses.Get(name)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading VolumeAttributesClass %q: %w", name, err)
		}
		return vac, err
	case api.State() == optionalapi.Forbidden && p.deps.Sources.AttributesClassGetter != nil:
		vac, err := p.deps.Sources.AttributesClassGetter(ctx, name)
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w: csi-provisioner may not read VolumeAttributesClass %q (RBAC): grant get on volumeattributesclasses (list and watch to cache them): %w",
				ErrAttributesClassRefused, name, err)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading VolumeAttributesClass %q: %w", name, err)
		}
		return vac, err
	}
	api.Poke()
	return nil, fmt.Errorf("%w: the claim names VolumeAttributesClass %q, but the API does not serve storage.k8s.io/v1 VolumeAttributesClass yet (Kubernetes 1.34 and later), or csi-provisioner may not read volumeattributesclasses (%s); retried, and picked up without a restart once it is",
		ErrAttributesClassRefused, name, api.State())
}
