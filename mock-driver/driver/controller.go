package driver

import (
	"context"
	"maps"
	"math"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

const (
	// ContextSegment is the volume context key naming the volume's segment,
	// "key=value,key=value" with keys sorted.
	ContextSegment = "mock.csi.example.com/segment"
	// defaultVolumeBytes is the size of a volume requested without a size.
	defaultVolumeBytes = int64(1) << 30
	// sizeUnit is what volume sizes are rounded up to.
	sizeUnit = int64(1) << 20
)

// ControllerGetCapabilities implements csi.ControllerServer.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		// Not SINGLE_NODE_MULTI_WRITER: a provisioner would then send the
		// new access modes for ReadWriteOnce claims (the node advertises it,
		// for csi-sanity's single-writer test).
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// validateCapabilities checks that there are capabilities and that each has
// an access mode and an access type.
func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
			return status.Error(codes.InvalidArgument, "a volume capability has no access mode")
		}
		if c.GetBlock() == nil && c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability has neither block nor mount access type")
		}
	}
	return nil
}

// requestedSize returns the size of a new volume: the required bytes (1 GiB
// when 0) rounded up to a MiB, but never above the limit.
func requestedSize(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Error(codes.InvalidArgument, "capacity range must not be negative")
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.InvalidArgument, "required bytes %d exceed limit bytes %d", req, lim)
	case req > math.MaxInt64-sizeUnit:
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d are too large", req)
	}
	size := req
	if size == 0 {
		size = defaultVolumeBytes
	}
	size = (size + sizeUnit - 1) / sizeUnit * sizeUnit
	if lim > 0 && size > lim {
		size = lim
	}
	return size, nil
}

// requirements returns the request's accessibility requirements, none with
// topology disabled.
func (d *Driver) requirements(req *csi.CreateVolumeRequest) *csi.TopologyRequirement {
	if d.cfg.DisableTopology {
		return nil
	}
	return req.GetAccessibilityRequirements()
}

// csiVolume is the CSI form of a volume.
func (d *Driver) csiVolume(v *state.Volume) *csi.Volume {
	vol := &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.CapacityBytes,
		VolumeContext: map[string]string{ContextSegment: segmentKey(v.Segment)},
	}
	if !d.cfg.DisableTopology && len(v.Segment) > 0 {
		vol.AccessibleTopology = []*csi.Topology{{Segments: maps.Clone(v.Segment)}}
	}
	return vol
}

// byName returns the volume called name, or nil.
func byName(vols map[string]*state.Volume, name string) *state.Volume {
	for _, v := range vols {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// CreateVolume implements csi.ControllerServer. It is idempotent by name;
// see place for where a volume goes. (The gRPC server logs the request and
// its outcome at V(2).)
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources are not supported")
	}
	size, err := requestedSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	var existing *state.Volume
	d.store.View(func(vols map[string]*state.Volume) {
		if v := byName(vols, req.GetName()); v != nil {
			existing = v.Clone()
		}
	})
	if existing != nil {
		if err := d.compatible(existing, req); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(existing)}, nil
	}
	reqs := d.requirements(req)
	first := req.GetVolumeCapabilities()[0]
	var out *state.Volume
	err = d.store.Update(func(vols map[string]*state.Volume, newID func() string) error {
		if v := byName(vols, req.GetName()); v != nil { // created meanwhile
			out = v.Clone()
			return d.compatible(v, req)
		}
		seg, err := place(d.usage(vols), reqs, size, d.cfg.MaxVolumeBytes)
		if err != nil {
			return err
		}
		v := &state.Volume{
			ID: newID(), Name: req.GetName(), CapacityBytes: size, Segment: maps.Clone(seg.topology),
			Parameters: maps.Clone(req.GetParameters()), Block: first.GetBlock() != nil,
			AccessMode: first.GetAccessMode().GetMode().String(),
		}
		vols[v.ID] = v
		out = v.Clone()
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "creating volume "+req.GetName())
	}
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(out)}, nil
}

// compatible checks a re-create of existing volume v: size within the
// requested range, same access type and mode, same parameters, and a segment
// within the requisite topologies. Anything else is ALREADY_EXISTS.
func (d *Driver) compatible(v *state.Volume, req *csi.CreateVolumeRequest) error {
	r := req.GetCapacityRange()
	first := req.GetVolumeCapabilities()[0]
	switch {
	case r.GetRequiredBytes() > 0 && v.CapacityBytes < r.GetRequiredBytes(),
		r.GetLimitBytes() > 0 && v.CapacityBytes > r.GetLimitBytes():
		return status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, outside the requested range", v.Name, v.CapacityBytes)
	case v.Block != (first.GetBlock() != nil):
		return status.Errorf(codes.AlreadyExists, "volume %q exists with another access type", v.Name)
	case v.AccessMode != first.GetAccessMode().GetMode().String():
		return status.Errorf(codes.AlreadyExists, "volume %q exists with access mode %s", v.Name, v.AccessMode)
	case !maps.Equal(v.Parameters, req.GetParameters()):
		return status.Errorf(codes.AlreadyExists, "volume %q exists with other parameters", v.Name)
	}
	if requisite := d.requirements(req).GetRequisite(); len(requisite) > 0 {
		for _, t := range requisite {
			if matches(v.Segment, t.GetSegments()) {
				return nil
			}
		}
		return status.Errorf(codes.AlreadyExists, "volume %q exists in segment {%s}, outside the requisite topologies %s",
			v.Name, segmentKey(v.Segment), describeTopologies(requisite))
	}
	return nil
}

// DeleteVolume implements csi.ControllerServer; deleting an unknown volume
// succeeds.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	var exists bool
	d.store.View(func(vols map[string]*state.Volume) { _, exists = vols[req.GetVolumeId()] })
	if !exists {
		return &csi.DeleteVolumeResponse{}, nil
	}
	err := d.store.Update(func(vols map[string]*state.Volume, _ func() string) error {
		delete(vols, req.GetVolumeId())
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "deleting volume "+req.GetVolumeId())
	}
	klog.FromContext(ctx).V(2).Info("Volume deleted", "volumeID", req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities implements csi.ControllerServer: it confirms
// capabilities of the volume's access type.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	var v *state.Volume
	d.store.View(func(vols map[string]*state.Volume) {
		if found, ok := vols[req.GetVolumeId()]; ok {
			v = found.Clone()
		}
	})
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	for _, c := range req.GetVolumeCapabilities() {
		if (c.GetBlock() != nil) != v.Block {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume's access type is " + accessType(v.Block)}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func accessType(block bool) string {
	if block {
		return "block"
	}
	return "mount"
}
