package driver

import (
	"context"
	"maps"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// publication is one NodePublishVolume target of a volume.
type publication struct {
	readonly bool
	block    bool
	mode     csi.VolumeCapability_AccessMode_Mode
}

// NodeGetInfo implements csi.NodeServer.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumesPerNode}
	if !d.cfg.DisableTopology && len(d.cfg.NodeTopology) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: maps.Clone(d.cfg.NodeTopology)}
	}
	return resp, nil
}

// NodeGetCapabilities implements csi.NodeServer.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkTarget validates a target path: absolute and not the root.
func checkTarget(path string) error {
	switch {
	case path == "":
		return status.Error(codes.InvalidArgument, "target path is required")
	case !filepath.IsAbs(path) || filepath.Clean(path) == "/":
		return status.Errorf(codes.InvalidArgument, "target path %q must be an absolute path below /", path)
	}
	return nil
}

// NodePublishVolume implements csi.NodeServer. It creates the target, a
// directory for a mount volume or a file for a block volume, and records it.
// Without Config.DataDir the mock's data live in the target; with it the
// target is a bind mount of the volume's data there (see bindData), as a
// kubelet needs to keep the data across unpublish and publish. Publishing
// again at the same target with the same capability and readonly flag
// succeeds, with others is ALREADY_EXISTS; a SINGLE_NODE_SINGLE_WRITER volume
// at a second target is FAILED_PRECONDITION.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := checkTarget(req.GetTargetPath()); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	id, target := req.GetVolumeId(), filepath.Clean(req.GetTargetPath())
	pub := publication{
		readonly: req.GetReadonly(),
		block:    req.GetVolumeCapability().GetBlock() != nil,
		mode:     req.GetVolumeCapability().GetAccessMode().GetMode(),
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, other := range d.targets[id] {
		if t == target && other != pub {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is published at %q with another capability or readonly flag", id, target)
		}
		if t != target && (pub.mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER ||
			other.mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is single-writer and published at %q", id, t)
		}
	}
	if d.cfg.DataDir == "" {
		if err := makeTarget(target, pub.block); err != nil {
			return nil, err
		}
	} else if err := d.bindData(ctx, id, target, pub); err != nil {
		return nil, err
	}
	if d.targets[id] == nil {
		d.targets[id] = map[string]publication{}
	}
	d.targets[id][target] = pub
	klog.FromContext(ctx).V(2).Info("Volume published on the node", "volumeID", id, "target", target, "readonly", pub.readonly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// makeTarget creates a publish target and its parent directories.
func makeTarget(target string, block bool) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return status.Errorf(codes.Internal, "creating the parent of target %q: %v", target, err)
	}
	if !block {
		if err := os.MkdirAll(target, 0o750); err != nil {
			return status.Errorf(codes.Internal, "creating target directory %q: %v", target, err)
		}
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDWR, 0o640)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return status.Errorf(codes.Internal, "creating target file %q: %v", target, err)
	}
	return nil
}

// NodeUnpublishVolume implements csi.NodeServer: without Config.DataDir it
// removes the target with everything in it; with it, it unmounts the target
// and removes the empty mount point, keeping the data (see unbindData). It
// succeeds when the target is already gone.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := checkTarget(req.GetTargetPath()); err != nil {
		return nil, err
	}
	id, target := req.GetVolumeId(), filepath.Clean(req.GetTargetPath())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg.DataDir != "" {
		if err := d.unbindData(ctx, id, target); err != nil {
			return nil, err
		}
	} else if err := os.RemoveAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "removing target %q: %v", target, err)
	}
	if _, ok := d.targets[id][target]; ok {
		delete(d.targets[id], target)
		if len(d.targets[id]) == 0 {
			delete(d.targets, id)
		}
		klog.FromContext(ctx).V(2).Info("Volume unpublished on the node", "volumeID", id, "target", target)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
