package driver

import (
	"context"
	"maps"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// errSnapshotsDisabled answers the snapshot calls with snapshots disabled.
var errSnapshotsDisabled = status.Error(codes.Unimplemented, "snapshots are disabled")

// csiSnapshot is the CSI form of a snapshot; the mock's snapshots are ready
// at once.
func csiSnapshot(s *state.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     s.ID,
		SourceVolumeId: s.SourceVolumeID,
		SizeBytes:      s.SizeBytes,
		CreationTime:   timestamppb.New(s.CreationTime),
		ReadyToUse:     true,
	}
}

// snapshotByName returns the snapshot called name, or nil.
func snapshotByName(snaps map[string]*state.Snapshot, name string) *state.Snapshot {
	for _, s := range snaps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// CreateSnapshot implements csi.ControllerServer. It is idempotent by name:
// the same name with the same source volume and parameters answers the same
// snapshot, with another source or other parameters it is ALREADY_EXISTS. An
// unknown source volume is NOT_FOUND. The snapshot has the source's size,
// is ready to use at once and remembers the source's segment, where volumes
// restored from it go; it does not count against the segment's capacity.
func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	switch {
	case d.cfg.DisableSnapshots:
		return nil, errSnapshotsDisabled
	case req.GetName() == "":
		return nil, status.Error(codes.InvalidArgument, "snapshot name is required")
	case req.GetSourceVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "source volume ID is required")
	}
	var existing *state.Snapshot
	d.store.View(func(data *state.Data) {
		if s := snapshotByName(data.Snapshots, req.GetName()); s != nil {
			existing = s.Clone()
		}
	})
	if existing != nil {
		if err := compatibleSnapshot(existing, req); err != nil {
			return nil, err
		}
		return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(existing)}, nil
	}
	var out *state.Snapshot
	created := false
	err := d.store.Update(func(data *state.Data) error {
		if s := snapshotByName(data.Snapshots, req.GetName()); s != nil { // created meanwhile
			out = s.Clone()
			return compatibleSnapshot(s, req)
		}
		v, ok := data.Volumes[req.GetSourceVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "source volume %q not found", req.GetSourceVolumeId())
		}
		s := &state.Snapshot{
			ID: data.NewSnapshotID(), Name: req.GetName(), SourceVolumeID: v.ID, SizeBytes: v.CapacityBytes,
			Segment: maps.Clone(v.Segment), Parameters: maps.Clone(req.GetParameters()),
			CreationTime: time.Now().UTC(),
		}
		data.Snapshots[s.ID] = s
		out, created = s.Clone(), true
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "creating snapshot "+req.GetName())
	}
	if created {
		klog.FromContext(ctx).V(2).Info("Snapshot created", "snapshotID", out.ID, "name", out.Name,
			"sourceVolumeID", out.SourceVolumeID, "segment", out.Segment)
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(out)}, nil
}

// compatibleSnapshot checks a re-create of existing snapshot s.
func compatibleSnapshot(s *state.Snapshot, req *csi.CreateSnapshotRequest) error {
	switch {
	case s.SourceVolumeID != req.GetSourceVolumeId():
		return status.Errorf(codes.AlreadyExists, "snapshot %q exists of another volume, %q", s.Name, s.SourceVolumeID)
	case !maps.Equal(s.Parameters, req.GetParameters()):
		return status.Errorf(codes.AlreadyExists, "snapshot %q exists with other parameters", s.Name)
	}
	return nil
}

// DeleteSnapshot implements csi.ControllerServer; deleting an unknown
// snapshot succeeds. Volumes restored from it stay.
func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	switch {
	case d.cfg.DisableSnapshots:
		return nil, errSnapshotsDisabled
	case req.GetSnapshotId() == "":
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is required")
	}
	var exists bool
	d.store.View(func(data *state.Data) { _, exists = data.Snapshots[req.GetSnapshotId()] })
	if !exists {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	err := d.store.Update(func(data *state.Data) error {
		delete(data.Snapshots, req.GetSnapshotId())
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "deleting snapshot "+req.GetSnapshotId())
	}
	klog.FromContext(ctx).V(2).Info("Snapshot deleted", "snapshotID", req.GetSnapshotId())
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots implements csi.ControllerServer. Snapshots come in ID
// order, filtered by snapshot_id and source_volume_id when given (an
// unknown one gives an empty list); pages work as in ListVolumes: the next
// token is the last snapshot ID of the page, an invalid token is ABORTED.
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if d.cfg.DisableSnapshots {
		return nil, errSnapshotsDisabled
	}
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	var after int64
	if tok := req.GetStartingToken(); tok != "" {
		n, ok := state.SnapshotSeq(tok)
		if !ok {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", tok)
		}
		after = n
	}
	resp := &csi.ListSnapshotsResponse{}
	limit := int(req.GetMaxEntries())
	for _, s := range d.store.Snapshots() {
		if n, _ := state.SnapshotSeq(s.ID); n <= after ||
			(req.GetSnapshotId() != "" && s.ID != req.GetSnapshotId()) ||
			(req.GetSourceVolumeId() != "" && s.SourceVolumeID != req.GetSourceVolumeId()) {
			continue
		}
		if limit > 0 && len(resp.Entries) == limit {
			resp.NextToken = resp.Entries[limit-1].GetSnapshot().GetSnapshotId()
			break
		}
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(&s)})
	}
	return resp, nil
}

// Snapshots returns a copy of the driver's snapshots in ID order.
func (d *Driver) Snapshots() []state.Snapshot { return d.store.Snapshots() }
