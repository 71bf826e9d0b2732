package driver

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

const (
	defaultVolumeBytes = int64(1) << 30
	// ContextSegment is the volume context key naming the volume's segment.
	ContextSegment = "mock.csi.example.com/segment"
)

// ControllerGetCapabilities implements csi.ControllerServer.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
			return status.Error(codes.InvalidArgument, "a volume capability has no access mode")
		}
		if c.GetBlock() == nil && c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "a volume capability has neither block nor mount access type")
		}
	}
	return nil
}

func requestedSize(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity range must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.InvalidArgument, "required bytes %d exceed limit bytes %d", req, lim)
	}
	switch {
	case req > 0:
		return req, nil
	case lim > 0 && lim < defaultVolumeBytes:
		return lim, nil
	default:
		return defaultVolumeBytes, nil
	}
}

func (d *Driver) csiVolume(v *state.Volume) *csi.Volume {
	vol := &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.CapacityBytes,
		VolumeContext: map[string]string{ContextSegment: segmentKey(v.Segment)},
	}
	if !d.cfg.DisableTopology && len(v.Segment) > 0 {
		vol.AccessibleTopology = []*csi.Topology{{Segments: v.Segment}}
	}
	return vol
}

// CreateVolume implements csi.ControllerServer; see place for the rules.
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	logger := klog.FromContext(ctx)
	resp, err := d.createVolume(ctx, req)
	rec := CreateRecord{
		Time:       time.Now(),
		Name:       req.GetName(),
		Requisite:  topologies(req.GetAccessibilityRequirements().GetRequisite()),
		Preferred:  topologies(req.GetAccessibilityRequirements().GetPreferred()),
		Parameters: req.GetParameters(),
	}
	if err != nil {
		rec.Result = err.Error()
	} else {
		rec.Result = resp.GetVolume().GetVolumeId()
	}
	d.record(rec)
	logger.V(2).Info("CreateVolume", "name", req.GetName(), "requisite", rec.Requisite,
		"preferred", rec.Preferred, "result", rec.Result)
	return resp, err
}

func (d *Driver) createVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
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
	reqs := req.GetAccessibilityRequirements()
	if d.cfg.DisableTopology {
		reqs = nil
	}
	block := req.GetVolumeCapabilities()[0].GetBlock() != nil
	mode := req.GetVolumeCapabilities()[0].GetAccessMode().GetMode().String()

	var out *state.Volume
	var faultSegment map[string]string
	if len(reqs.GetPreferred()) > 0 {
		faultSegment = reqs.GetPreferred()[0].GetSegments()
	}
	// Placement is decided under the store's lock; the fault check (which may
	// sleep) runs outside it, then the volume is committed.
	var chosen segmentUsage
	var existing *state.Volume
	d.store.View(func(vols map[string]*state.Volume) {
		for _, v := range vols {
			if v.Name == req.GetName() {
				existing = v.Clone()
				return
			}
		}
		chosen, err = place(d.usage(vols), reqs, size, d.cfg.MaxVolumeBytes)
	})
	if existing != nil {
		if err := compatible(existing, req, block); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: d.csiVolume(existing)}, nil
	}
	if faultSegment == nil && err == nil {
		faultSegment = chosen.topology
	}
	if ferr := d.faults.Check(ctx, "CreateVolume", faultSegment); ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, err
	}
	err = d.store.Update(func(vols map[string]*state.Volume, newID func() string) error {
		for _, v := range vols {
			if v.Name == req.GetName() {
				out = v.Clone()
				return compatible(v, req, block)
			}
		}
		// Re-check room: another CreateVolume may have committed meanwhile.
		seg, err := place(d.usage(vols), reqs, size, d.cfg.MaxVolumeBytes)
		if err != nil {
			return err
		}
		v := &state.Volume{
			ID: newID(), Name: req.GetName(), CapacityBytes: size, Segment: seg.topology,
			Parameters: req.GetParameters(), Block: block, AccessMode: mode,
		}
		vols[v.ID] = v
		out = v.Clone()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: d.csiVolume(out)}, nil
}

// compatible checks a re-create of an existing volume.
func compatible(v *state.Volume, req *csi.CreateVolumeRequest, block bool) error {
	r := req.GetCapacityRange()
	if (r.GetRequiredBytes() > 0 && v.CapacityBytes < r.GetRequiredBytes()) ||
		(r.GetLimitBytes() > 0 && v.CapacityBytes > r.GetLimitBytes()) {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, incompatible with the requested range", v.Name, v.CapacityBytes)
	}
	if v.Block != block {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with another access type", v.Name)
	}
	if len(req.GetParameters()) != len(v.Parameters) {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with other parameters", v.Name)
	}
	for k, val := range req.GetParameters() {
		if v.Parameters[k] != val {
			return status.Errorf(codes.AlreadyExists, "volume %q exists with other parameters", v.Name)
		}
	}
	return nil
}

// DeleteVolume implements csi.ControllerServer; an unknown ID succeeds.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	var seg map[string]string
	d.store.View(func(vols map[string]*state.Volume) {
		if v, ok := vols[req.GetVolumeId()]; ok {
			seg = v.Segment
		}
	})
	if err := d.faults.Check(ctx, "DeleteVolume", seg); err != nil {
		return nil, err
	}
	err := d.store.Update(func(vols map[string]*state.Volume, _ func() string) error {
		delete(vols, req.GetVolumeId())
		return nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	klog.FromContext(ctx).V(2).Info("DeleteVolume", "volumeID", req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities implements csi.ControllerServer.
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	found := false
	d.store.View(func(vols map[string]*state.Volume) { _, found = vols[req.GetVolumeId()] })
	if !found {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ListVolumes implements csi.ControllerServer with index-based tokens.
func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if err := d.faults.Check(ctx, "ListVolumes", nil); err != nil {
		return nil, err
	}
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	vols := d.store.List()
	start := 0
	if tok := req.GetStartingToken(); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(vols) {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", tok)
		}
		start = n
	}
	end := len(vols)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	resp := &csi.ListVolumesResponse{}
	for i := start; i < end; i++ {
		v := vols[i]
		nodes := make([]string, 0, len(v.Published))
		for n := range v.Published {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: d.csiVolume(&v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
		})
	}
	if end < len(vols) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// GetCapacity implements csi.ControllerServer: the free bytes of the
// segments within the requested topology (all segments without one).
func (d *Driver) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	topo := req.GetAccessibleTopology().GetSegments()
	if err := d.faults.Check(ctx, "GetCapacity", topo); err != nil {
		return nil, err
	}
	var free, largest int64
	d.store.View(func(vols map[string]*state.Volume) {
		for _, s := range d.usage(vols) {
			if !within(s.topology, topo) {
				continue
			}
			f := s.free(d.cfg.MaxVolumeBytes)
			if f < 0 {
				f = 0
			}
			free += f
			if f > largest {
				largest = f
			}
		}
	})
	resp := &csi.GetCapacityResponse{AvailableCapacity: free}
	if largest > 0 {
		resp.MaximumVolumeSize = wrapperspb.Int64(min(largest, d.cfg.MaxVolumeBytes))
	}
	return resp, nil
}
