package driver

import (
	"context"
	"encoding/json"
	"maps"
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// maxRecords is how many Controller service calls the driver remembers.
const maxRecords = 5000

// CreateRecord is the record of a CreateVolume call, the kind most tests
// read; it is a CallRecord.
type CreateRecord = CallRecord

// CallRecord is one call of the Controller service (CreateVolume,
// DeleteVolume, ControllerModifyVolume, ...) as the admin endpoint reports
// it. Secret values are never recorded, only their keys.
type CallRecord struct {
	// Seq numbers the recorded calls from 1, also across the ring's
	// turnover.
	Seq int64 `json:"seq"`
	// Method is the CSI method, e.g. "CreateVolume".
	Method string `json:"method"`
	// Time is when the answer was sent.
	Time time.Time `json:"time"`
	// Name is the requested volume or snapshot name (CreateVolume,
	// CreateSnapshot).
	Name string `json:"name,omitempty"`
	// VolumeID is the request's volume ID, for calls on a volume.
	VolumeID string `json:"volumeId,omitempty"`
	// Request is the whole request as protobuf JSON (protojson, lower camel
	// case field names), every secret's value replaced by "".
	Request json.RawMessage `json:"request,omitempty"`
	// Requisite and Preferred are the accessibility requirements.
	Requisite []map[string]string `json:"requisite,omitempty"`
	// Preferred: see Requisite.
	Preferred []map[string]string `json:"preferred,omitempty"`
	// Parameters are the request's parameters.
	Parameters map[string]string `json:"parameters,omitempty"`
	// MutableParameters are the request's mutable parameters.
	MutableParameters map[string]string `json:"mutableParameters,omitempty"`
	// ContentSource is the request's content source (a snapshot or volume
	// ID), nil without one.
	ContentSource *state.ContentSource `json:"contentSource,omitempty"`
	// Code is the answer's gRPC code name, "OK" on success.
	Code string `json:"code"`
	// Result is the volume ID, or the error.
	Result string `json:"result"`
	// Segment is the created volume's segment (success only).
	Segment map[string]string `json:"segment,omitempty"`
	// CallerGone is true when the caller's context had ended (cancelled or
	// past its deadline) before the answer: the caller did not see Code
	// and Result, e.g. a volume made by a late-success fault rule.
	CallerGone bool `json:"callerGone,omitempty"`
	// SecretKeys are the keys of the request's secrets, sorted; their
	// values are never recorded.
	SecretKeys []string `json:"secretKeys,omitempty"`
}

// recordCreate remembers a CreateVolume request and its answer (fault or
// not) and logs the topology decision at V(2).
func (d *Driver) recordCreate(ctx context.Context, req *csi.CreateVolumeRequest, resp any, err error) {
	rec := CallRecord{
		Method:            "CreateVolume",
		Request:           redactedJSON(req),
		Time:              time.Now(),
		Name:              req.GetName(),
		Requisite:         topologies(req.GetAccessibilityRequirements().GetRequisite()),
		Preferred:         topologies(req.GetAccessibilityRequirements().GetPreferred()),
		Parameters:        maps.Clone(req.GetParameters()),
		MutableParameters: maps.Clone(req.GetMutableParameters()),
		Code:              status.Code(err).String(),
		CallerGone:        ctx.Err() != nil,
	}
	if src, srcErr := d.contentSource(req.GetVolumeContentSource()); srcErr == nil {
		rec.ContentSource = src
	}
	rec.SecretKeys = secretKeys(req)
	if err != nil {
		rec.Result = err.Error()
	} else if r, ok := resp.(*csi.CreateVolumeResponse); ok {
		rec.Result = r.GetVolume().GetVolumeId()
		if ts := r.GetVolume().GetAccessibleTopology(); len(ts) > 0 {
			rec.Segment = ts[0].GetSegments()
		}
	}
	d.appendRecord(rec)
	klog.FromContext(ctx).V(2).Info("CreateVolume", "name", rec.Name, "requisite", rec.Requisite,
		"preferred", rec.Preferred, "code", rec.Code, "result", rec.Result, "segment", rec.Segment, "callerGone", rec.CallerGone)
}

// recordCall remembers a Controller service call other than CreateVolume
// with its answer.
func (d *Driver) recordCall(ctx context.Context, method string, req any, resp any, err error) {
	rec := CallRecord{Method: method, Time: time.Now(), Code: status.Code(err).String(), CallerGone: ctx.Err() != nil}
	if m, ok := req.(proto.Message); ok {
		rec.Request = redactedJSON(m)
		rec.SecretKeys = secretKeys(m)
	}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		rec.VolumeID = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetName() string }); ok {
		rec.Name = r.GetName()
	}
	if err != nil {
		rec.Result = err.Error()
	} else if r, ok := resp.(*csi.CreateSnapshotResponse); ok {
		rec.Result = r.GetSnapshot().GetSnapshotId()
	}
	d.appendRecord(rec)
}

// appendRecord numbers rec and adds it to the ring.
func (d *Driver) appendRecord(rec CallRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	rec.Seq = d.seq
	d.requests = append(d.requests, rec)
	if len(d.requests) >= 2*maxRecords { // trim in batches: amortized O(1)
		d.requests = append([]CallRecord(nil), d.requests[len(d.requests)-maxRecords:]...)
	}
}

// Requests returns the last CreateVolume requests that came through the
// gRPC server (among the last maxRecords calls), oldest first.
func (d *Driver) Requests() []CreateRecord { return d.Calls("CreateVolume") }

// Calls returns the last (up to maxRecords) Controller service calls of
// method ("": of every method) that came through the gRPC server, oldest
// first.
func (d *Driver) Calls(method string) []CallRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	recs := d.requests
	if len(recs) > maxRecords {
		recs = recs[len(recs)-maxRecords:]
	}
	var out []CallRecord
	for _, r := range recs {
		if method == "" || r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// redactedJSON returns msg as protojson with every secret value (the fields
// the CSI spec marks csi_secret, at any depth) replaced by "", keys kept;
// the message itself is not changed.
func redactedJSON(msg proto.Message) json.RawMessage {
	m := proto.Clone(msg)
	redactSecrets(m.ProtoReflect())
	data, err := protojson.Marshal(m)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return data
}

// redactSecrets empties the values of the secret fields of m and of the
// messages it holds.
func redactSecrets(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd) && fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				v.Map().Set(k, protoreflect.ValueOfString(""))
				return true
			})
		case isSecret(fd):
			m.Clear(fd)
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := range v.List().Len() {
				redactSecrets(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				redactSecrets(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			redactSecrets(v.Message())
		}
		return true
	})
}

// isSecret reports whether the CSI spec marks a field csi_secret.
func isSecret(fd protoreflect.FieldDescriptor) bool {
	ext, ok := proto.GetExtension(fd.Options(), csi.E_CsiSecret).(bool)
	return ok && ext
}

// secretKeys returns the sorted keys of the request's secrets.
func secretKeys(msg proto.Message) []string {
	r, ok := msg.(interface{ GetSecrets() map[string]string })
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(r.GetSecrets()))
	for k := range r.GetSecrets() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
