package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// ListVolumes implements csi.ControllerServer. Volumes come in ID order; a
// next token is the last volume ID of the page, so that a page is right
// even when volumes were deleted or added since the previous one.
func (d *Driver) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	var after int64
	if tok := req.GetStartingToken(); tok != "" {
		n, ok := state.Seq(tok)
		if !ok {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", tok)
		}
		after = n
	}
	resp := &csi.ListVolumesResponse{}
	max := int(req.GetMaxEntries())
	for _, v := range d.store.List() {
		if n, _ := state.Seq(v.ID); n <= after {
			continue
		}
		if max > 0 && len(resp.Entries) == max {
			resp.NextToken = resp.Entries[max-1].GetVolume().GetVolumeId()
			break
		}
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: d.csiVolume(&v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.PublishedNodes()},
		})
	}
	return resp, nil
}

// GetCapacity implements csi.ControllerServer: the free bytes of the
// segments that match the requested topology (see matches; all segments
// without one). An unlimited segment counts as MaxVolumeBytes free.
// maximum_volume_size is the largest free space of one matching segment.
func (d *Driver) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	topo := req.GetAccessibleTopology().GetSegments()
	var free, largest int64
	d.store.View(func(data *state.Data) {
		for _, s := range d.usage(data.Volumes) {
			if !matches(s.topology, topo) {
				continue
			}
			f := s.free(d.cfg.MaxVolumeBytes)
			free += f
			largest = max(largest, min(f, d.cfg.MaxVolumeBytes))
		}
	})
	return &csi.GetCapacityResponse{AvailableCapacity: free, MaximumVolumeSize: wrapperspb.Int64(largest)}, nil
}
