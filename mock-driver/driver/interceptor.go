package driver

import (
	"context"
	"maps"
	"path"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// controllerService prefixes the full gRPC method names of the CSI
// Controller service.
const controllerService = "/csi.v1.Controller/"

// interceptor runs around every gRPC call: it puts the driver's logger in
// the call's context, logs request and response (secrets stripped) at V(4),
// applies the fault rules before the method runs, and records the calls of
// the Controller service with their answers (CallRecord). A call that a late-success rule delays runs
// on a context that the caller's end does not reach (only the driver's
// stop), so it is carried out after the caller has given up.
func (d *Driver) interceptor(stop context.Context, logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		logger := klog.LoggerWithValues(logger, "method", method)
		ctx = klog.NewContext(ctx, logger)
		logger.V(4).Info("CSI request", "request", protosanitizer.StripSecrets(req))
		if r, ok := req.(*csi.CreateVolumeRequest); ok && r.GetName() != "" {
			// As the CSI spec recommends: one operation per volume name at a
			// time. A second CreateVolume of a name while the first still
			// runs (e.g. held by a late-success rule after its caller gave
			// up) gets ABORTED, so that the caller retries and then finds the
			// volume, instead of the driver making two.
			done, ok := d.beginCreate(r.GetName())
			if !ok {
				err := status.Errorf(codes.Aborted, "an operation on volume name %q is in progress", r.GetName())
				d.recordCreate(ctx, r, nil, err)
				logger.V(4).Info("CSI error", "code", codes.Aborted, "err", err)
				return nil, err
			}
			defer done()
		}
		verdict := d.faults.Decide(method, d.faultSegment(method, req))
		callCtx := ctx
		if verdict.LateSuccess {
			var cancel context.CancelFunc
			callCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			defer cancel()
			defer context.AfterFunc(stop, cancel)()
			logger.V(4).Info("CSI call delayed, to be carried out even after its caller gives up", "latency", verdict.Latency)
		}
		var resp any
		err := d.faults.Wait(callCtx, verdict)
		if err != nil {
			logger.V(4).Info("CSI fault injected", "code", status.Code(err), "err", err)
		} else {
			resp, err = handler(callCtx, req)
		}
		if r, ok := req.(*csi.CreateVolumeRequest); ok {
			d.recordCreate(ctx, r, resp, err)
		} else if strings.HasPrefix(info.FullMethod, controllerService) {
			d.recordCall(ctx, method, req, resp, err)
		}
		if err != nil {
			logger.V(4).Info("CSI error", "code", status.Code(err), "err", err)
		} else {
			logger.V(4).Info("CSI response", "response", protosanitizer.StripSecrets(resp), "callerGone", ctx.Err() != nil)
		}
		return resp, err
	}
}

// faultSegment returns the segment a call concerns, for segment-scoped fault
// rules:
//   - CreateVolume: the first preferred topology; without one, the segment
//     of the volume of that name if it exists, else the segment the driver
//     would choose now (for a clone or restore, its source's; nil when it
//     would fail);
//   - Node service calls: the node's segment;
//   - GetCapacity: the requested topology;
//   - CreateSnapshot: the source volume's segment; DeleteSnapshot: the
//     snapshot's;
//   - other calls with a volume ID: the volume's segment, when the
//     controller knows the volume;
//   - anything else: nil, which only rules without a segment match.
func (d *Driver) faultSegment(method string, req any) map[string]string {
	var seg map[string]string
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		return d.createSegment(r)
	case *csi.GetCapacityRequest:
		return r.GetAccessibleTopology().GetSegments()
	case *csi.CreateSnapshotRequest:
		d.store.View(func(data *state.Data) {
			if v, ok := data.Volumes[r.GetSourceVolumeId()]; ok {
				seg = maps.Clone(v.Segment)
			}
		})
		return seg
	case *csi.DeleteSnapshotRequest:
		d.store.View(func(data *state.Data) {
			if s, ok := data.Snapshots[r.GetSnapshotId()]; ok {
				seg = maps.Clone(s.Segment)
			}
		})
		return seg
	}
	if strings.HasPrefix(method, "Node") {
		return d.cfg.NodeTopology
	}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		d.store.View(func(data *state.Data) {
			if v, ok := data.Volumes[r.GetVolumeId()]; ok {
				seg = maps.Clone(v.Segment)
			}
		})
	}
	return seg
}

// createSegment is faultSegment for CreateVolume.
func (d *Driver) createSegment(req *csi.CreateVolumeRequest) map[string]string {
	if p := d.requirements(req).GetPreferred(); len(p) > 0 {
		return p[0].GetSegments()
	}
	source, err := d.contentSource(req.GetVolumeContentSource())
	var seg map[string]string
	d.store.View(func(data *state.Data) {
		if v := byName(data.Volumes, req.GetName()); v != nil {
			seg = maps.Clone(v.Segment)
			return
		}
		if err != nil {
			return
		}
		if p, err := d.plan(data, req, source); err == nil {
			seg = p.segment.topology
		}
	})
	return seg
}

// beginCreate marks a CreateVolume of name as running; ok is false when one
// already runs. done ends the mark.
func (d *Driver) beginCreate(name string) (done func(), ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, busy := d.creating[name]; busy {
		return nil, false
	}
	if d.creating == nil {
		d.creating = map[string]struct{}{}
	}
	d.creating[name] = struct{}{}
	return func() {
		d.mu.Lock()
		delete(d.creating, name)
		d.mu.Unlock()
	}, true
}
