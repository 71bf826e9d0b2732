package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

// --csi-address accepts a socket path or a unix URL; anything else is one
// line saying which form to use.
func TestValidateCSIAddress(t *testing.T) {
	tests := []struct {
		name    string
		address string
		wantErr string
	}{
		{name: "path", address: "/run/csi/socket"},
		{name: "unix URL", address: "unix:///csi/csi.sock"},
		{name: "tcp", address: "tcp://127.0.0.1:10000", wantErr: `--csi-address: unsupported CSI address: "tcp://127.0.0.1:10000": scheme "tcp://" is not supported`},
		{name: "host and port", address: "127.0.0.1:10000", wantErr: "looks like a TCP host:port"},
		{name: "relative path", address: "csi.sock", wantErr: "is a relative path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config{csiAddress: tc.address, kubeAPIQPS: 1, kubeAPIBurst: 1, nodeSelection: "all"}
			cfg.controller.WorkerThreads = 1
			err := cfg.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("validate error = %v, want %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
		})
	}
}

// parseFlags refuses a bad address before it configures logging (which
// can be done once per process).
func TestParseFlagsRefusesTCP(t *testing.T) {
	_, err := parseFlags([]string{"--csi-address=tcp://127.0.0.1:10000"})
	if err == nil || !strings.HasPrefix(err.Error(), "--csi-address: unsupported CSI address") {
		t.Fatalf("parseFlags error = %v, want an unsupported --csi-address", err)
	}
}

// A kubeconfig that cannot be loaded is reported at once, before
// csi-provisioner waits for a driver (whose socket does not exist here).
func TestRunReportsBadKubeconfigFirst(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.yaml")
	if err := os.WriteFile(garbage, []byte("clusters: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		kubeconfig string
		wantErr    string
	}{
		{name: "missing file", kubeconfig: filepath.Join(dir, "missing.yaml"), wantErr: "no such file or directory"},
		{name: "not YAML", kubeconfig: garbage, wantErr: "error loading config file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			// Waiting for the driver would end with the context, and run
			// returns nil then.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cfg := config{csiAddress: filepath.Join(dir, "csi.sock"), kubeconfig: tc.kubeconfig, kubeAPIQPS: 1, kubeAPIBurst: 1}
			err := run(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), "loading kubeconfig") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run = %v, want a kubeconfig error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestHealthEndpoints(t *testing.T) {
	up := func() (bool, string) { return true, "" }
	down := func() (bool, string) {
		return false, "no connection to CSI driver \"d\" at /csi.sock for 5s; reconnecting"
	}
	probeOK := func(context.Context) error { return nil }
	probeFails := func(context.Context) error { return errors.New("rpc error: code = Unavailable") }
	yes := func() bool { return true }
	no := func() bool { return false }
	type answer struct {
		code int
		body string
	}
	tests := []struct {
		name    string
		sources *healthSources
		healthz answer
		readyz  answer
	}{
		{name: "waiting for the driver at start-up",
			healthz: answer{503, "waiting for the CSI driver at /csi.sock"}, readyz: answer{503, "waiting for the CSI driver at /csi.sock"}},
		{name: "connected leader", sources: &healthSources{driver: up, probe: probeOK, leading: yes},
			healthz: answer{200, "ok"}, readyz: answer{200, "ok"}},
		{name: "connected standby", sources: &healthSources{driver: up, probe: probeOK, leading: no},
			healthz: answer{200, "ok"}, readyz: answer{503, "not leading"}},
		{name: "driver gone", sources: &healthSources{driver: down, probe: probeFails, leading: yes},
			healthz: answer{503, "no connection to CSI driver"}, readyz: answer{503, "no connection to CSI driver"}},
		{name: "driver not ready", sources: &healthSources{driver: up, probe: probeFails, leading: yes},
			healthz: answer{503, "CSI driver not ready"}, readyz: answer{200, "ok"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &health{address: "/csi.sock"}
			if tc.sources != nil {
				h.connected(*tc.sources)
			}
			mux := http.NewServeMux()
			h.register(mux)
			for path, want := range map[string]answer{"/livez": {200, "ok"}, "/healthz/leader-election": {200, "ok"}, "/healthz": tc.healthz, "/readyz": tc.readyz} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want.code || !strings.Contains(rec.Body.String(), want.body) {
					t.Errorf("%s = %d %q, want %d with %q", path, rec.Code, rec.Body.String(), want.code, want.body)
				}
			}
		})
	}
}

// The HTTP endpoint serves metrics on --metrics-path and profiling only with
// --enable-pprof, as upstream's does.
func TestMux(t *testing.T) {
	tests := []struct {
		name     string
		cfg      config
		wantCode map[string]int
	}{
		{name: "defaults", cfg: config{metricsPath: "/metrics"},
			wantCode: map[string]int{"/metrics": 200, "/debug/pprof/": 404, "/healthz/leader-election": 200}},
		{name: "pprof", cfg: config{metricsPath: "/metrics", enablePprof: true},
			wantCode: map[string]int{"/metrics": 200, "/debug/pprof/": 200, "/debug/pprof/cmdline": 200}},
		{name: "metrics path", cfg: config{metricsPath: "/m"},
			wantCode: map[string]int{"/m": 200, "/metrics": 404}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			mux := newMux(ctx, tc.cfg, metrics.NewCSIMetricsManagerForSidecar(""), &health{address: "/csi.sock"})
			for path, want := range tc.wantCode {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want {
					t.Errorf("GET %s = %d, want %d", path, rec.Code, want)
				}
			}
		})
	}
}

// TestNewClientsBindingBudget: bind-through's client has a rate limit of
// its own, three times the work's (three writes per claim against one PV
// create), so that binding keeps pace with provisioning; without the flag
// the binding writes have no client of their own.
func TestNewClientsBindingBudget(t *testing.T) {
	tests := []struct {
		name        string
		bindThrough bool
		wantQPS     float32
	}{
		{name: "bind-through", bindThrough: true, wantQPS: 60},
		{name: "off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config{kubeAPIQPS: 20, kubeAPIBurst: 40}
			cfg.controller.BindThrough = tc.bindThrough
			c, err := newClients(cfg, &rest.Config{Host: "https://127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.bindThrough {
				if c.Binding != nil {
					t.Error("a binding client without --bind-through")
				}
				return
			}
			if got := c.Binding.CoreV1().RESTClient().GetRateLimiter().QPS(); got != tc.wantQPS {
				t.Errorf("binding client's QPS %v, want %v", got, tc.wantQPS)
			}
			if got := c.Work.CoreV1().RESTClient().GetRateLimiter().QPS(); got != 20 {
				t.Errorf("work client's QPS %v, want 20", got)
			}
		})
	}
}
