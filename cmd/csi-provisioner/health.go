package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// health answers the health endpoints of csi-provisioner:
//
//   - /livez: 200 while the process serves HTTP. The liveness probe: a
//     driver outage is not cured by restarting csi-provisioner.
//   - /healthz: 200 while the driver is connected and answers Probe
//     (ready); 503 with the reason otherwise.
//   - /readyz: 200 while this replica provisions: the driver is connected
//     and the replica leads (or runs without leader election); 503 with the
//     reason otherwise.
type health struct {
	// driver reports whether the driver is connected, and why not.
	driver func() (connected bool, reason string)
	// probe probes the driver once.
	probe func(context.Context) error
	// leading reports whether this replica provisions.
	leading func() bool
}

func (h health) register(mux *http.ServeMux) {
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/healthz", h.healthz)
	mux.HandleFunc("/readyz", h.readyz)
}

func (h health) healthz(w http.ResponseWriter, r *http.Request) {
	if ok, reason := h.driver(); !ok {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := h.probe(ctx); err != nil {
		http.Error(w, fmt.Sprintf("CSI driver not ready: %v", err), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h health) readyz(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := h.driver(); !ok {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	if !h.leading() {
		http.Error(w, "not leading: a standby replica does not provision", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
