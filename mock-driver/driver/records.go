package driver

import (
	"context"
	"maps"
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// maxRecords is how many CreateVolume requests the driver remembers.
const maxRecords = 1000

// CreateRecord is one CreateVolume request as the admin endpoint reports it.
// Secrets are never recorded.
type CreateRecord struct {
	// Seq numbers the requests from 1, also across the ring's turnover.
	Seq int64 `json:"seq"`
	// Time is when the answer was sent.
	Time time.Time `json:"time"`
	// Name is the requested volume name.
	Name string `json:"name"`
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
	rec := CreateRecord{
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
	for k := range req.GetSecrets() {
		rec.SecretKeys = append(rec.SecretKeys, k)
	}
	sort.Strings(rec.SecretKeys)
	if err != nil {
		rec.Result = err.Error()
	} else if r, ok := resp.(*csi.CreateVolumeResponse); ok {
		rec.Result = r.GetVolume().GetVolumeId()
		if ts := r.GetVolume().GetAccessibleTopology(); len(ts) > 0 {
			rec.Segment = ts[0].GetSegments()
		}
	}
	d.mu.Lock()
	d.seq++
	rec.Seq = d.seq
	d.requests = append(d.requests, rec)
	if len(d.requests) >= 2*maxRecords { // trim in batches: amortized O(1)
		d.requests = append([]CreateRecord(nil), d.requests[len(d.requests)-maxRecords:]...)
	}
	d.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("CreateVolume", "name", rec.Name, "requisite", rec.Requisite,
		"preferred", rec.Preferred, "code", rec.Code, "result", rec.Result, "segment", rec.Segment, "callerGone", rec.CallerGone)
}

// Requests returns the last (up to maxRecords) CreateVolume requests that
// came through the gRPC server, oldest first.
func (d *Driver) Requests() []CreateRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	recs := d.requests
	if len(recs) > maxRecords {
		recs = recs[len(recs)-maxRecords:]
	}
	return append([]CreateRecord(nil), recs...)
}
