package driver

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// contentSource checks a CreateVolume content source against the enabled
// capabilities and returns it in the state's form (nil without one). A
// snapshot source needs snapshots, a volume source cloning; without them, or
// with an empty ID or an unknown kind of source, it is INVALID_ARGUMENT.
// Whether the source exists is plan's business.
func (d *Driver) contentSource(src *csi.VolumeContentSource) (*state.ContentSource, error) {
	if src == nil {
		return nil, nil
	}
	switch t := src.GetType().(type) {
	case *csi.VolumeContentSource_Snapshot:
		if d.cfg.DisableSnapshots {
			return nil, status.Error(codes.InvalidArgument, "this driver does not restore snapshots (snapshots are disabled)")
		}
		if t.Snapshot.GetSnapshotId() == "" {
			return nil, status.Error(codes.InvalidArgument, "the snapshot content source has no snapshot ID")
		}
		return &state.ContentSource{SnapshotID: t.Snapshot.GetSnapshotId()}, nil
	case *csi.VolumeContentSource_Volume:
		if d.cfg.DisableCloning {
			return nil, status.Error(codes.InvalidArgument, "this driver does not clone volumes (cloning is disabled)")
		}
		if t.Volume.GetVolumeId() == "" {
			return nil, status.Error(codes.InvalidArgument, "the volume content source has no volume ID")
		}
		return &state.ContentSource{VolumeID: t.Volume.GetVolumeId()}, nil
	default:
		return nil, status.Error(codes.InvalidArgument, "the volume content source is neither a snapshot nor a volume")
	}
}

// csiContentSource is the CSI form of a content source; nil for nil.
func csiContentSource(src *state.ContentSource) *csi.VolumeContentSource {
	switch {
	case src == nil:
		return nil
	case src.SnapshotID != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: src.SnapshotID}}}
	default:
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeID}}}
	}
}

// sameSource reports whether two content sources are equal; nil is none.
func sameSource(a, b *state.ContentSource) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func describeSource(src *state.ContentSource) string {
	switch {
	case src == nil:
		return "none"
	case src.SnapshotID != "":
		return fmt.Sprintf("snapshot %q", src.SnapshotID)
	default:
		return fmt.Sprintf("volume %q", src.VolumeID)
	}
}

// placeAt picks the segment of a clone or restore of size bytes: the
// source's segment, the only place where the source's data are. It is
// RESOURCE_EXHAUSTED when the requisite topologies exclude that segment (the
// volume cannot be made where the caller needs it; another node, one that
// reaches the source, may do), when the segment has no room, or when the
// driver no longer has that segment; a size above the largest volume is
// OUT_OF_RANGE. Preferred topologies do not matter: there is one candidate.
func placeAt(segs []segmentUsage, source map[string]string, reqs *csi.TopologyRequirement, size, maxVolume int64) (segmentUsage, error) {
	if size > maxVolume {
		return segmentUsage{}, status.Errorf(codes.OutOfRange,
			"a volume of %d bytes is larger than the largest volume this driver makes (%d bytes)", size, maxVolume)
	}
	key := segmentKey(source)
	for _, s := range segs {
		if s.key != key {
			continue
		}
		if requisite := reqs.GetRequisite(); len(requisite) > 0 && !matchesAny(s.topology, requisite) {
			return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
				"the content source lives in segment {%s}, outside the requisite topologies %s; a clone or restore can only be made there",
				key, describeTopologies(requisite))
		}
		if size > s.free(maxVolume) {
			return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
				"no room for %d bytes in the content source's segment {%s}: %d bytes free", size, key, s.free(maxVolume))
		}
		return s, nil
	}
	return segmentUsage{}, status.Errorf(codes.ResourceExhausted,
		"the content source lives in segment {%s}, which is not in this driver's segment table", key)
}

// matchesAny reports whether segment s matches one of the topologies ts.
func matchesAny(s map[string]string, ts []*csi.Topology) bool {
	for _, t := range ts {
		if matches(s, t.GetSegments()) {
			return true
		}
	}
	return false
}
