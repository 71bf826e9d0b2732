package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// maxAdminBody bounds admin request bodies.
const maxAdminBody = 1 << 20

// VolumeStatus is a volume as GET /volumes reports it. Its JSON also decodes
// into a state.Volume (without the published nodes).
type VolumeStatus struct {
	// ID is the volume handle.
	ID string `json:"id"`
	// Name is the CreateVolume name.
	Name string `json:"name"`
	// CapacityBytes is the volume's size.
	CapacityBytes int64 `json:"capacityBytes"`
	// Segment is the volume's topology segment.
	Segment map[string]string `json:"segment,omitempty"`
	// Parameters are the CreateVolume parameters.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Block is true for a raw block volume.
	Block bool `json:"block,omitempty"`
	// AccessMode is the CSI access mode the volume was created with.
	AccessMode string `json:"accessMode,omitempty"`
	// MutableParameters are the volume's mutable parameters: those of
	// CreateVolume with every ControllerModifyVolume merged in.
	MutableParameters map[string]string `json:"mutableParameters,omitempty"`
	// ContentSource is what the volume was cloned or restored from.
	ContentSource *state.ContentSource `json:"contentSource,omitempty"`
	// PublishedNodes are the nodes of ControllerPublishVolume, sorted.
	PublishedNodes []string `json:"publishedNodes"`
}

// SegmentStatus is a segment as GET /segments reports it.
type SegmentStatus struct {
	// Topology is the segment.
	Topology map[string]string `json:"topology"`
	// CapacityBytes is the segment's capacity; negative: unlimited.
	CapacityBytes int64 `json:"capacityBytes"`
	// UsedBytes is the sum of the sizes of the segment's volumes.
	UsedBytes int64 `json:"usedBytes"`
}

// Segments returns every segment with its capacity and usage, in
// segment-key order.
func (d *Driver) Segments() []SegmentStatus {
	var out []SegmentStatus
	d.store.View(func(data *state.Data) {
		for _, s := range d.usage(data.Volumes) {
			out = append(out, SegmentStatus{Topology: maps.Clone(s.topology), CapacityBytes: s.capacity, UsedBytes: s.used})
		}
	})
	return out
}

// SetCapacity changes the capacity of a configured segment (negative:
// unlimited); keys without '/' get TopologyPrefix. Volumes already there
// stay, even when they now exceed the capacity.
func (d *Driver) SetCapacity(topology map[string]string, capacity int64) error {
	key := segmentKey(NormalizeSegment(topology))
	for _, s := range d.cfg.Segments {
		if segmentKey(s.Topology) == key {
			d.mu.Lock()
			d.capacity[key] = capacity
			d.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("the driver has no segment {%s}", key)
}

// volumeStatuses returns the volumes as GET /volumes reports them.
func (d *Driver) volumeStatuses() []VolumeStatus {
	vols := d.store.List()
	out := make([]VolumeStatus, 0, len(vols))
	for _, v := range vols {
		out = append(out, VolumeStatus{
			ID: v.ID, Name: v.Name, CapacityBytes: v.CapacityBytes, Segment: v.Segment, Parameters: v.Parameters,
			Block: v.Block, AccessMode: v.AccessMode, MutableParameters: v.MutableParameters,
			ContentSource: v.ContentSource, PublishedNodes: v.PublishedNodes(),
		})
	}
	return out
}

// adminHandler serves the admin API (see mock-driver/README.md).
func (d *Driver) adminHandler(logger klog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /volumes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.volumeStatuses()) })
	mux.HandleFunc("GET /snapshots", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.Snapshots()) })
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		m := r.URL.Query().Get("method")
		if m != "" && csi.File_csi_proto.Services().ByName("Controller").Methods().ByName(protoreflect.Name(m)) == nil {
			http.Error(w, fmt.Sprintf("%q is not a method of the Controller service; only its calls are recorded", m), http.StatusBadRequest)
			return
		}
		recs := d.Calls(m)
		if recs == nil {
			recs = []CallRecord{}
		}
		writeJSON(w, recs)
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.faults.Rules()) })
	mux.HandleFunc("PUT /faults", func(w http.ResponseWriter, r *http.Request) {
		var rules []faults.Rule
		if !readJSON(w, r, &rules) {
			return
		}
		if err := d.SetFaults(rules); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		logger.Info("Fault rules replaced", "rules", rules)
		writeJSON(w, d.faults.Rules())
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, _ *http.Request) {
		_ = d.faults.Set(nil)
		logger.Info("Fault rules cleared")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /segments", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.Segments()) })
	mux.HandleFunc("PUT /segments", func(w http.ResponseWriter, r *http.Request) {
		var s struct {
			Topology      map[string]string `json:"topology"`
			CapacityBytes *int64            `json:"capacityBytes"`
		}
		if !readJSON(w, r, &s) {
			return
		}
		if s.CapacityBytes == nil {
			http.Error(w, "capacityBytes is required", http.StatusBadRequest)
			return
		}
		if err := d.SetCapacity(s.Topology, *s.CapacityBytes); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		logger.Info("Segment capacity changed", "segment", s.Topology, "capacityBytes", *s.CapacityBytes)
		writeJSON(w, d.Segments())
	})
	return mux
}

// readJSON decodes a bounded request body strictly into v, answering 400
// (413 when too large) and returning false when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	err := decodeStrictFrom(http.MaxBytesReader(w, r.Body, maxAdminBody), v)
	if err == nil {
		return true
	}
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		http.Error(w, fmt.Sprintf("request body larger than %d bytes", maxAdminBody), http.StatusRequestEntityTooLarge)
		return false
	}
	http.Error(w, "malformed JSON body: "+err.Error(), http.StatusBadRequest)
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
