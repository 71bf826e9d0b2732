package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics"
)

func TestParseFlagsHTTPEndpoint(t *testing.T) {
	// parseFlags applies the logging flags, which component-base allows
	// once per process unless they stay the same.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr bool
	}{
		{name: "off by default", args: []string{"--driver-name=d"}, want: ""},
		{name: "set", args: []string{"--driver-name=d", "--http-endpoint=:8080"}, want: ":8080"},
		{
			name: "with client certificates on --listen",
			args: []string{"--driver-name=d", "--http-endpoint=:8080", "--tls-cert-file=c", "--tls-private-key-file=k", "--client-ca-file=ca"},
			want: ":8080",
		},
		{name: "same address as --listen", args: []string{"--driver-name=d", "--listen=:9000", "--http-endpoint=:9000"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && cfg.httpEndpoint != tc.want {
				t.Errorf("httpEndpoint = %q, want %q", cfg.httpEndpoint, tc.want)
			}
		})
	}
}

// The plain-HTTP endpoint serves /healthz and the extender's metrics, and
// none of the extender verbs.
func TestHealthAndMetricsMux(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	m := newExtenderMetrics(reg)
	m.Observe("filter", http.StatusOK, time.Millisecond)
	m.Rejected("VolumeLimitExceeded")
	mux := http.NewServeMux()
	registerHealthAndMetrics(mux, reg)
	tests := []struct {
		name      string
		method    string
		path      string
		want      int
		wantLines []string
	}{
		{name: "healthz", method: "GET", path: "/healthz", want: 200, wantLines: []string{"ok"}},
		{
			name: "metrics", method: "GET", path: "/metrics", want: 200,
			wantLines: []string{
				`csi_scheduler_extender_requests_total{code="200",verb="filter"} 1`,
				`csi_scheduler_extender_request_duration_seconds_count{verb="filter"} 1`,
				`csi_scheduler_extender_rejected_nodes_total{reason="VolumeLimitExceeded"} 1`,
			},
		},
		{name: "no filter", method: "POST", path: "/filter", want: 404},
		{name: "no prioritize", method: "POST", path: "/prioritize", want: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.want {
				t.Errorf("%s %s = %d, want %d", tc.method, tc.path, rec.Code, tc.want)
			}
			lines := strings.Split(rec.Body.String(), "\n")
			for _, w := range tc.wantLines {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("%s %s lacks the line %q:\n%s", tc.method, tc.path, w, rec.Body.String())
				}
			}
		})
	}
}

func TestParseFlagsHeartbeat(t *testing.T) {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	tests := []struct {
		name   string
		args   []string
		wantOn bool
		wantNS string
	}{
		{name: "on by default, all namespaces", args: []string{"--driver-name=d"}, wantOn: true},
		{name: "off", args: []string{"--driver-name=d", "--driver-heartbeat=false"}},
		{name: "one namespace", args: []string{"--driver-name=d", "--heartbeat-namespace=csi"}, wantOn: true, wantNS: "csi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.heartbeat != tc.wantOn || cfg.heartbeatNS != tc.wantNS {
				t.Errorf("heartbeat %v in %q, want %v in %q", cfg.heartbeat, cfg.heartbeatNS, tc.wantOn, tc.wantNS)
			}
		})
	}
}
