package driver

import (
	"context"
	"path"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// interceptor runs around every gRPC call: it puts the driver's logger in
// the call's context, logs request and response (secrets stripped) at V(4),
// applies the fault rules before the method runs, and records CreateVolume
// requests with their answers.
func (d *Driver) interceptor(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		logger := klog.LoggerWithValues(logger, "method", method)
		ctx = klog.NewContext(ctx, logger)
		logger.V(4).Info("CSI request", "request", protosanitizer.StripSecrets(req))
		var resp any
		err := d.faults.Check(ctx, method, d.faultSegment(method, req))
		if err != nil {
			logger.V(4).Info("CSI fault injected", "code", status.Code(err), "err", err)
		} else {
			resp, err = handler(ctx, req)
		}
		if r, ok := req.(*csi.CreateVolumeRequest); ok {
			d.recordCreate(ctx, r, resp, err)
		}
		if err != nil {
			logger.V(4).Info("CSI error", "code", status.Code(err), "err", err)
		} else {
			logger.V(4).Info("CSI response", "response", protosanitizer.StripSecrets(resp))
		}
		return resp, err
	}
}

// faultSegment returns the segment a call concerns, for segment-scoped fault
// rules:
//   - CreateVolume: the first preferred topology; without one, the segment
//     of the volume of that name if it exists, else the segment the driver
//     would choose now (nil when it would fail);
//   - Node service calls: the node's segment;
//   - GetCapacity: the requested topology;
//   - other calls with a volume ID: the volume's segment, when the
//     controller knows the volume;
//   - anything else: nil, which only rules without a segment match.
func (d *Driver) faultSegment(method string, req any) map[string]string {
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		return d.createSegment(r)
	case *csi.GetCapacityRequest:
		return r.GetAccessibleTopology().GetSegments()
	}
	if strings.HasPrefix(method, "Node") {
		return d.cfg.NodeTopology
	}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		var seg map[string]string
		d.store.View(func(vols map[string]*state.Volume) {
			if v, ok := vols[r.GetVolumeId()]; ok {
				seg = v.Clone().Segment
			}
		})
		return seg
	}
	return nil
}

// createSegment is faultSegment for CreateVolume.
func (d *Driver) createSegment(req *csi.CreateVolumeRequest) map[string]string {
	reqs := d.requirements(req)
	if p := reqs.GetPreferred(); len(p) > 0 {
		return p[0].GetSegments()
	}
	size, err := requestedSize(req.GetCapacityRange())
	var seg map[string]string
	d.store.View(func(vols map[string]*state.Volume) {
		if v := byName(vols, req.GetName()); v != nil {
			seg = v.Clone().Segment
			return
		}
		if err != nil {
			return
		}
		if s, err := place(d.usage(vols), reqs, size, d.cfg.MaxVolumeBytes); err == nil {
			seg = s.topology
		}
	})
	return seg
}
