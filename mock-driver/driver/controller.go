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

// ControllerGetCapabilities implements csi.ControllerServer: the volume,
// publish, list and capacity capabilities always; snapshots, cloning and
// modification unless disabled.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		// Not SINGLE_NODE_MULTI_WRITER: a provisioner would then send the
		// new access modes for ReadWriteOnce claims (the node advertises it,
		// for csi-sanity's single-writer test).
	}
	if !d.cfg.DisableSnapshots {
		types = append(types, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
			csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS)
	}
	if !d.cfg.DisableCloning {
		types = append(types, csi.ControllerServiceCapability_RPC_CLONE_VOLUME)
	}
	if !d.cfg.DisableModify {
		types = append(types, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME)
	}
	caps := make([]*csi.ControllerServiceCapability, 0, len(types))
	for _, t := range types {
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

// requestedSize returns the size of a new volume: the required bytes
// rounded up to a MiB, but never above the limit. Without required bytes it
// is the source's size for a clone or restore (sourceBytes > 0), else 1 GiB.
// A clone or restore smaller than its source is OUT_OF_RANGE.
func requestedSize(r *csi.CapacityRange, sourceBytes int64) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Error(codes.InvalidArgument, "capacity range must not be negative")
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.InvalidArgument, "required bytes %d exceed limit bytes %d", req, lim)
	case req > math.MaxInt64-sizeUnit:
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d are too large", req)
	case req > 0 && req < sourceBytes:
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d are less than the %d bytes of the volume content source", req, sourceBytes)
	case lim > 0 && lim < sourceBytes:
		return 0, status.Errorf(codes.OutOfRange, "limit bytes %d are less than the %d bytes of the volume content source", lim, sourceBytes)
	}
	size := req
	if size == 0 {
		size = defaultVolumeBytes
		if sourceBytes > 0 {
			size = sourceBytes
		}
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
		ContentSource: csiContentSource(v.ContentSource),
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
// see plan for where a volume goes and how big it is. (The gRPC server logs
// the request and its outcome at V(2).)
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	source, err := d.contentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	if err := d.validateMutableParameters(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	var existing *state.Volume
	d.store.View(func(data *state.Data) {
		if v := byName(data.Volumes, req.GetName()); v != nil {
			existing = v.Clone()
		}
	})
	if existing != nil {
		if err := d.compatible(existing, req, source); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(existing)}, nil
	}
	first := req.GetVolumeCapabilities()[0]
	var out *state.Volume
	err = d.store.Update(func(data *state.Data) error {
		if v := byName(data.Volumes, req.GetName()); v != nil { // created meanwhile
			out = v.Clone()
			return d.compatible(v, req, source)
		}
		p, err := d.plan(data, req, source)
		if err != nil {
			return err
		}
		v := &state.Volume{
			ID: data.NewVolumeID(), Name: req.GetName(), CapacityBytes: p.size, Segment: maps.Clone(p.segment.topology),
			Parameters: maps.Clone(req.GetParameters()), Block: first.GetBlock() != nil,
			AccessMode: first.GetAccessMode().GetMode().String(), ContentSource: source,
			MutableParameters: maps.Clone(req.GetMutableParameters()),
		}
		data.Volumes[v.ID] = v
		out = v.Clone()
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "creating volume "+req.GetName())
	}
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(out)}, nil
}

// volumePlan is the size and segment of a new volume.
type volumePlan struct {
	size    int64
	segment segmentUsage
}

// plan sizes and places a new volume (see requestedSize, place and
// placeAt): an empty volume, and a restore with Config.RegionalSnapshots,
// goes where the requirements allow, a clone or other restore only into its
// source's segment. An unknown source is NOT_FOUND.
// Call it with the store locked (data is the store's).
func (d *Driver) plan(data *state.Data, req *csi.CreateVolumeRequest, source *state.ContentSource) (volumePlan, error) {
	var srcBytes int64
	var srcSegment map[string]string
	switch {
	case source == nil:
	case source.SnapshotID != "":
		s, ok := data.Snapshots[source.SnapshotID]
		if !ok {
			return volumePlan{}, status.Errorf(codes.NotFound, "source snapshot %q not found", source.SnapshotID)
		}
		srcBytes, srcSegment = s.SizeBytes, s.Segment
	default:
		v, ok := data.Volumes[source.VolumeID]
		if !ok {
			return volumePlan{}, status.Errorf(codes.NotFound, "source volume %q not found", source.VolumeID)
		}
		srcBytes, srcSegment = v.CapacityBytes, v.Segment
	}
	size, err := requestedSize(req.GetCapacityRange(), srcBytes)
	if err != nil {
		return volumePlan{}, err
	}
	segs := d.usage(data.Volumes)
	var seg segmentUsage
	if source == nil || (source.SnapshotID != "" && d.cfg.RegionalSnapshots) {
		seg, err = place(segs, d.requirements(req), size, d.cfg.MaxVolumeBytes)
	} else {
		seg, err = placeAt(segs, srcSegment, d.requirements(req), size, d.cfg.MaxVolumeBytes)
	}
	return volumePlan{size: size, segment: seg}, err
}

// compatible checks a re-create of existing volume v: size within the
// requested range, same access type and mode, same parameters and content
// source, and a segment within the requisite topologies. Anything else is
// ALREADY_EXISTS. Mutable parameters are not compared: ControllerModifyVolume
// changes them.
func (d *Driver) compatible(v *state.Volume, req *csi.CreateVolumeRequest, source *state.ContentSource) error {
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
	case !sameSource(v.ContentSource, source):
		return status.Errorf(codes.AlreadyExists, "volume %q exists with content source %s", v.Name, describeSource(v.ContentSource))
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
// succeeds. Snapshots of the volume and volumes cloned from it stay.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	var exists bool
	d.store.View(func(data *state.Data) { _, exists = data.Volumes[req.GetVolumeId()] })
	if !exists {
		return &csi.DeleteVolumeResponse{}, nil
	}
	err := d.store.Update(func(data *state.Data) error {
		delete(data.Volumes, req.GetVolumeId())
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
	d.store.View(func(data *state.Data) {
		if found, ok := data.Volumes[req.GetVolumeId()]; ok {
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
