package driver

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// validateMutableParameters checks mutable parameters (of CreateVolume or
// ControllerModifyVolume): with MODIFY_VOLUME disabled there must be none;
// otherwise every key must be one of Config.MutableParameters. Values are
// opaque. Anything else is INVALID_ARGUMENT.
func (d *Driver) validateMutableParameters(params map[string]string) error {
	if len(params) == 0 {
		return nil
	}
	if d.cfg.DisableModify {
		return status.Error(codes.InvalidArgument, "this driver takes no mutable parameters (modifying volumes is disabled)")
	}
	keys := slices.Sorted(maps.Keys(params))
	for _, k := range keys {
		if !slices.Contains(d.cfg.MutableParameters, k) {
			return status.Errorf(codes.InvalidArgument, "mutable parameter %q is not supported; this driver accepts %s",
				k, strings.Join(d.cfg.MutableParameters, ", "))
		}
	}
	return nil
}

// ControllerModifyVolume implements csi.ControllerServer: it merges the
// mutable parameters into the volume's (keys that are not given stay as
// they are, as the CSI spec demands). An unknown volume is NOT_FOUND; the
// parameters are checked by validateMutableParameters. With MODIFY_VOLUME
// disabled it is UNIMPLEMENTED.
func (d *Driver) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	if d.cfg.DisableModify {
		return nil, status.Error(codes.Unimplemented, "modifying volumes is disabled")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := d.validateMutableParameters(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	err := d.store.Update(func(data *state.Data) error {
		v, ok := data.Volumes[req.GetVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
		}
		if len(req.GetMutableParameters()) > 0 && v.MutableParameters == nil {
			v.MutableParameters = map[string]string{}
		}
		maps.Copy(v.MutableParameters, req.GetMutableParameters())
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "modifying volume "+req.GetVolumeId())
	}
	klog.FromContext(ctx).V(2).Info("Volume modified", "volumeID", req.GetVolumeId(), "mutableParameters", req.GetMutableParameters())
	return &csi.ControllerModifyVolumeResponse{}, nil
}
