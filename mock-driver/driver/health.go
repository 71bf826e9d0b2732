package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// healthProbeTimeout bounds the Probe call behind one GET /healthz; a
// kubelet probe with a shorter timeoutSeconds cancels it earlier.
const healthProbeTimeout = 3 * time.Second

// prober is the part of the CSI Identity client the health endpoint uses.
type prober interface {
	Probe(ctx context.Context, in *csi.ProbeRequest, opts ...grpc.CallOption) (*csi.ProbeResponse, error)
}

// healthHandler serves GET /healthz and nothing else: 200 while serving()
// is true and a Probe through client answers ready, 503 otherwise.
func healthHandler(serving func() bool, client prober) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !serving() {
			http.Error(w, "the CSI gRPC server is not serving", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), healthProbeTimeout)
		defer cancel()
		resp, err := client.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			http.Error(w, fmt.Sprintf("CSI Probe failed: %v", err), http.StatusServiceUnavailable)
			return
		}
		if ready := resp.GetReady(); ready != nil && !ready.GetValue() {
			http.Error(w, "CSI Probe answered not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serveHealth starts the health endpoint on cfg.HealthAddress. Its Probe
// goes through the driver's own socket, so it exercises the gRPC server, the
// interceptor and any fault rule for Probe, exactly as a sidecar's would.
// The returned function stops the endpoint; a serving error goes to errCh.
func (d *Driver) serveHealth(socket string, errCh chan<- error) (func(), error) {
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("health endpoint: connecting to %q: %w", socket, err)
	}
	lis, err := net.Listen("tcp", d.cfg.HealthAddress)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("listening on health address %q: %w", d.cfg.HealthAddress, err)
	}
	d.mu.Lock()
	d.healthAddr = lis.Addr().String()
	d.mu.Unlock()
	srv := &http.Server{
		Handler:           healthHandler(d.serving.Load, csi.NewIdentityClient(conn)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errCh <- fmt.Errorf("serving the health endpoint: %w", err)
		}
	}()
	return func() {
		srv.Close()
		conn.Close()
	}, nil
}

// HealthURL returns the health endpoint's base URL, "http://host:port",
// once Ready; "" without a health endpoint.
func (d *Driver) HealthURL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.healthAddr == "" {
		return ""
	}
	return "http://" + d.healthAddr
}
