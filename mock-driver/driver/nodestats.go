package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats implements csi.NodeServer for volumes this node
// published: a mount volume reports the usage of the file system its target
// lives on, a block volume the size of its target file. A volume not
// published at the path is NOT_FOUND.
func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	id, path := req.GetVolumeId(), filepath.Clean(req.GetVolumePath())
	d.mu.Lock()
	pub, ok := d.targets[id][path]
	d.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q is not published at %q on this node", id, path)
	}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "target %q of volume %q is gone", path, id)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading target %q: %v", path, err)
	}
	if pub.block {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{
			Unit: csi.VolumeUsage_BYTES, Total: info.Size(),
		}}}, nil
	}
	usage, err := fsUsage(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading file system statistics of %q: %v", path, err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: usage}, nil
}
