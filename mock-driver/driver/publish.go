package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// knownNode reports whether ControllerPublishVolume accepts a node ID.
func (d *Driver) knownNode(id string) bool {
	if len(d.cfg.KnownNodes) > 0 {
		for _, n := range d.cfg.KnownNodes {
			if n == id {
				return true
			}
		}
		return false
	}
	if d.cfg.Mode == ModeBoth {
		return id == d.cfg.NodeID
	}
	return true
}

// nodeLimit returns the attach limit of a node (0: none).
func (d *Driver) nodeLimit(id string) int64 {
	if l, ok := d.cfg.NodeLimits[id]; ok {
		return l
	}
	return d.cfg.MaxVolumesPerNode
}

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

// ControllerPublishVolume implements csi.ControllerServer. It enforces the
// node's volume limit with RESOURCE_EXHAUSTED.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node ID is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if err := validateCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	var seg map[string]string
	d.store.View(func(vols map[string]*state.Volume) {
		if v, ok := vols[req.GetVolumeId()]; ok {
			seg = v.Segment
		}
	})
	if err := d.faults.Check(ctx, "ControllerPublishVolume", seg); err != nil {
		return nil, err
	}
	node := req.GetNodeId()
	err := d.store.Update(func(vols map[string]*state.Volume, _ func() string) error {
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
		if singleNode(v.AccessMode) && len(v.Published) > 0 {
			return status.Errorf(codes.FailedPrecondition, "volume %q is single-node and already published to another node", v.ID)
		}
		if limit := d.nodeLimit(node); limit > 0 {
			var n int64
			for _, other := range vols {
				if _, ok := other.Published[node]; ok {
					n++
				}
			}
			if n >= limit {
				return status.Errorf(codes.ResourceExhausted, "node %q already has %d of at most %d volumes attached", node, n, limit)
			}
		}
		if v.Published == nil {
			v.Published = map[string]bool{}
		}
		v.Published[node] = req.GetReadonly()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"devicePath": "/dev/mock/" + req.GetVolumeId()}}, nil
}

// ControllerUnpublishVolume implements csi.ControllerServer; unpublishing
// what is not published succeeds.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if err := d.faults.Check(ctx, "ControllerUnpublishVolume", nil); err != nil {
		return nil, err
	}
	err := d.store.Update(func(vols map[string]*state.Volume, _ func() string) error {
		v, ok := vols[req.GetVolumeId()]
		if !ok {
			return nil
		}
		if req.GetNodeId() == "" {
			v.Published = nil
		} else {
			delete(v.Published, req.GetNodeId())
		}
		return nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
