package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

const maxAdminBody = 1 << 20

// SegmentStatus is a segment as GET /segments reports it.
type SegmentStatus struct {
	Topology      map[string]string `json:"topology"`
	CapacityBytes int64             `json:"capacityBytes"`
	UsedBytes     int64             `json:"usedBytes"`
}

func (d *Driver) record(r CreateRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requests = append(d.requests, r)
	if len(d.requests) > maxRecords {
		d.requests = append([]CreateRecord(nil), d.requests[len(d.requests)-maxRecords:]...)
	}
}

// Requests returns the recorded CreateVolume requests, oldest first.
func (d *Driver) Requests() []CreateRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]CreateRecord(nil), d.requests...)
}

// Segments returns every segment with its capacity and usage.
func (d *Driver) Segments() []SegmentStatus {
	var out []SegmentStatus
	d.store.View(func(vols map[string]*state.Volume) {
		for _, s := range d.usage(vols) {
			out = append(out, SegmentStatus{Topology: s.topology, CapacityBytes: s.capacity, UsedBytes: s.used})
		}
	})
	return out
}

// SetCapacity changes the capacity of a configured segment (negative:
// unlimited).
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
	return fmt.Errorf("no segment %s", key)
}

// SetFaults replaces the fault rules.
func (d *Driver) SetFaults(rules []faults.Rule) error {
	return d.faults.Set(normalizeRules(rules))
}

// adminHandler serves the admin API (see mock-driver/README.md).
func (d *Driver) adminHandler(logger klog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /volumes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.Volumes()) })
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		method := r.URL.Query().Get("method")
		if method != "" && method != "CreateVolume" {
			http.Error(w, "only CreateVolume requests are recorded", http.StatusBadRequest)
			return
		}
		writeJSON(w, d.Requests())
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
		logger.Info("Fault rules replaced", "rules", len(rules))
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

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "malformed JSON body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		http.Error(w, "malformed JSON body: trailing data", http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
