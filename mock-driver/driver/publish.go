package driver

import (
	"context"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// ContextDevicePath is the publish context key of ControllerPublishVolume.
const ContextDevicePath = "devicePath"

// knownNode reports whether ControllerPublishVolume accepts a node ID: one
// of KnownNodes when given; else any node for a controller (which cannot see
// the node instances) and only its own node for ModeBoth.
func (d *Driver) knownNode(id string) bool {
	switch {
	case len(d.cfg.KnownNodes) > 0:
		return slices.Contains(d.cfg.KnownNodes, id)
	case d.cfg.Mode == ModeBoth:
		return id == d.cfg.NodeID
	default:
		return true
	}
}

// nodeLimit returns the attach limit of a node (0: none).
func (d *Driver) nodeLimit(id string) int64 {
	if l, ok := d.cfg.NodeLimits[id]; ok {
		return l
	}
	return d.cfg.MaxVolumesPerNode
}

// singleNode reports whether an access mode allows one node only.
func singleNode(mode string) bool {
	switch mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER.String(),
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY.String(),
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER.String(),
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER.String():
		return true
	}
	return false
}

// ControllerPublishVolume implements csi.ControllerServer ("attach"). An
// unknown volume or node is NOT_FOUND; a node at its volume limit is
// RESOURCE_EXHAUSTED; a single-node volume published to another node is
// FAILED_PRECONDITION; publishing again with the same readonly flag
// succeeds, with another one is ALREADY_EXISTS.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node ID is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	node, mode := req.GetNodeId(), req.GetVolumeCapability().GetAccessMode().GetMode().String()
	var published bool
	err := d.store.Update(func(data *state.Data) error {
		vols := data.Volumes
		v, ok := vols[req.GetVolumeId()]
		if !ok {
			return status.Errorf(codes.NotFound, "volume %q not found", req.GetVolumeId())
		}
		if !d.knownNode(node) {
			return status.Errorf(codes.NotFound, "node %q not found", node)
		}
		if ro, ok := v.Published[node]; ok {
			if ro != req.GetReadonly() {
				return status.Errorf(codes.AlreadyExists, "volume %q is published to node %q with readonly=%v", v.ID, node, ro)
			}
			return nil
		}
		if (singleNode(mode) || singleNode(v.AccessMode)) && len(v.Published) > 0 {
			return status.Errorf(codes.FailedPrecondition, "volume %q is single-node and published to node %q", v.ID, v.PublishedNodes()[0])
		}
		if limit := d.nodeLimit(node); limit > 0 {
			var n int64
			for _, other := range vols {
				if _, ok := other.Published[node]; ok {
					n++
				}
			}
			if n >= limit {
				return status.Errorf(codes.ResourceExhausted, "node %q has %d volumes attached, its limit", node, n)
			}
		}
		if v.Published == nil {
			v.Published = map[string]bool{}
		}
		v.Published[node] = req.GetReadonly()
		published = true
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "publishing volume")
	}
	if published {
		klog.FromContext(ctx).V(2).Info("Volume published", "volumeID", req.GetVolumeId(), "nodeID", node, "readonly", req.GetReadonly())
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{ContextDevicePath: "/dev/mock/" + req.GetVolumeId()}}, nil
}

// ControllerUnpublishVolume implements csi.ControllerServer ("detach");
// without a node ID it unpublishes from every node. Unpublishing what is not
// published succeeds.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	var changed bool
	d.store.View(func(data *state.Data) {
		if v, ok := data.Volumes[req.GetVolumeId()]; ok {
			_, onNode := v.Published[req.GetNodeId()]
			changed = onNode || (req.GetNodeId() == "" && len(v.Published) > 0)
		}
	})
	if !changed {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	err := d.store.Update(func(data *state.Data) error {
		if v, ok := data.Volumes[req.GetVolumeId()]; ok {
			if req.GetNodeId() == "" {
				v.Published = nil
			} else {
				delete(v.Published, req.GetNodeId())
			}
		}
		return nil
	})
	if err != nil {
		return nil, asStatus(err, "unpublishing volume")
	}
	klog.FromContext(ctx).V(2).Info("Volume unpublished", "volumeID", req.GetVolumeId(), "nodeID", req.GetNodeId())
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// asStatus returns a status error as it is and anything else (a failure to
// persist the state) as INTERNAL.
func asStatus(err error, doing string) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "%s: %v", doing, err)
}
