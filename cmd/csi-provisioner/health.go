package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// health answers the health endpoints of csi-provisioner:
//
//   - /livez: 200 while the process serves HTTP. The liveness probe: a
//     driver outage is not cured by restarting csi-provisioner.
//   - /healthz/leader-election: the same as /livez, at the path of upstream
//     external-provisioner's liveness probe (its sample Deployment probes
//     it). Upstream fails it when the leader stopped renewing its Lease;
//     csi-provisioner exits then instead.
//   - /healthz: 200 while the driver is connected and answers Probe
//     (ready); 503 with the reason otherwise.
//   - /readyz: 200 while this replica provisions: the driver is connected
//     and the replica leads (or runs without leader election); 503 with the
//     reason otherwise.
//
// Until connected is called, /healthz and /readyz answer 503: the process
// waits for its driver. Safe for concurrent use.
type health struct {
	// address of the driver, for messages.
	address string
	sources atomic.Pointer[healthSources]
}

// healthSources are what the endpoints report once the driver answered.
type healthSources struct {
	// driver reports whether the driver is connected, and why not.
	driver func() (connected bool, reason string)
	// probe probes the driver once.
	probe func(context.Context) error
	// leading reports whether this replica provisions.
	leading func() bool
}

// connected switches the endpoints from "waiting for the driver" to s.
func (h *health) connected(s healthSources) { h.sources.Store(&s) }

func (h *health) register(mux *http.ServeMux) {
	alive := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("/livez", alive)
	mux.HandleFunc("/healthz/leader-election", alive)
	mux.HandleFunc("/healthz", h.healthz)
	mux.HandleFunc("/readyz", h.readyz)
}

// driverDown returns why the driver cannot be used, or "".
func (h *health) driverDown() (*healthSources, string) {
	s := h.sources.Load()
	if s == nil {
		return nil, fmt.Sprintf("waiting for the CSI driver at %s to answer (starting)", h.address)
	}
	if ok, reason := s.driver(); !ok {
		return s, reason
	}
	return s, ""
}

func (h *health) healthz(w http.ResponseWriter, r *http.Request) {
	s, down := h.driverDown()
	if down != "" {
		http.Error(w, down, http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.probe(ctx); err != nil {
		http.Error(w, fmt.Sprintf("CSI driver not ready: %v", err), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	s, down := h.driverDown()
	if down != "" {
		http.Error(w, down, http.StatusServiceUnavailable)
		return
	}
	if !s.leading() {
		http.Error(w, "not leading: a standby replica does not provision", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
