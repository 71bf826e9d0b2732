package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodeGetInfo implements csi.NodeServer.
func (d *Driver) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	if err := d.faults.Check(ctx, "NodeGetInfo", d.cfg.NodeTopology); err != nil {
		return nil, err
	}
	resp := &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumesPerNode}
	if !d.cfg.DisableTopology && len(d.cfg.NodeTopology) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: d.cfg.NodeTopology}
	}
	return resp, nil
}

// NodeGetCapabilities implements csi.NodeServer: no optional capabilities.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume implements csi.NodeServer. It creates the target (a
// directory for mount volumes, a file for block volumes) and records it;
// publishing the same volume at the same path again succeeds.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	if err := d.faults.Check(ctx, "NodePublishVolume", d.cfg.NodeTopology); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating parent of target %q: %v", target, err)
	}
	var err error
	if req.GetVolumeCapability().GetBlock() != nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDWR, 0o640); err == nil {
			err = f.Close()
		}
	} else {
		err = os.MkdirAll(target, 0o750)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "creating target %q: %v", target, err)
	}
	d.mu.Lock()
	if d.nodePublished[req.GetVolumeId()] == nil {
		d.nodePublished[req.GetVolumeId()] = map[string]bool{}
	}
	d.nodePublished[req.GetVolumeId()][target] = true
	d.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("NodePublishVolume", "volumeID", req.GetVolumeId(), "target", target)
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume implements csi.NodeServer; it removes the target and
// succeeds when it is already gone.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if err := d.faults.Check(ctx, "NodeUnpublishVolume", d.cfg.NodeTopology); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(req.GetTargetPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, fmt.Sprintf("removing target %q: %v", req.GetTargetPath(), err))
	}
	d.mu.Lock()
	delete(d.nodePublished[req.GetVolumeId()], req.GetTargetPath())
	if len(d.nodePublished[req.GetVolumeId()]) == 0 {
		delete(d.nodePublished, req.GetVolumeId())
	}
	d.mu.Unlock()
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
