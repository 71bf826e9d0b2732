package driver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// fakeProber answers Probe with resp and err.
type fakeProber struct {
	resp *csi.ProbeResponse
	err  error
}

func (f fakeProber) Probe(context.Context, *csi.ProbeRequest, ...grpc.CallOption) (*csi.ProbeResponse, error) {
	return f.resp, f.err
}

func TestHealthHandler(t *testing.T) {
	ready := &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}
	tests := []struct {
		name     string
		serving  bool
		probe    fakeProber
		method   string
		path     string
		want     int
		wantBody string // a substring
	}{
		{name: "serving and ready", serving: true, probe: fakeProber{resp: ready}, method: "GET", path: "/healthz", want: 200, wantBody: "ok"},
		{name: "ready unset means ready", serving: true, probe: fakeProber{resp: &csi.ProbeResponse{}}, method: "GET", path: "/healthz", want: 200},
		{name: "not serving", probe: fakeProber{resp: ready}, method: "GET", path: "/healthz", want: 503, wantBody: "not serving"},
		{name: "probe fails", serving: true, probe: fakeProber{err: status.Error(codes.Unavailable, "connection refused")}, method: "GET", path: "/healthz", want: 503, wantBody: "connection refused"},
		{name: "probe not ready", serving: true, probe: fakeProber{resp: &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}}, method: "GET", path: "/healthz", want: 503, wantBody: "not ready"},
		{name: "HEAD", serving: true, probe: fakeProber{resp: ready}, method: "HEAD", path: "/healthz", want: 200},
		{name: "wrong method", serving: true, probe: fakeProber{resp: ready}, method: "POST", path: "/healthz", want: 405},
		{name: "nothing else: no admin API", serving: true, probe: fakeProber{resp: ready}, method: "GET", path: "/volumes", want: 404},
		{name: "nothing else: no metrics", serving: true, probe: fakeProber{resp: ready}, method: "GET", path: "/metrics", want: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthHandler(func() bool { return tc.serving }, tc.probe)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("%s %s = %d %q, want %d with %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.want, tc.wantBody)
			}
		})
	}
}

// The health endpoint of a running driver probes it through its socket: 200
// while it serves, 503 while Probe fails, and nothing listens once Run has
// returned.
func TestHealthEndpoint(t *testing.T) {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	defer cancel()
	d := newTestDriver(t, func(c *Config) { c.HealthAddress = "127.0.0.1:0" })
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	if d.AdminURL() != "" {
		t.Errorf("AdminURL() = %q without an admin address", d.AdminURL())
	}
	url := d.HealthURL()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("HealthURL() = %q", url)
	}
	// No keep-alive: every request dials, as a kubelet probe does.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(t *testing.T, path string) (int, string, error) {
		t.Helper()
		req, err := http.NewRequestWithContext(tctx, "GET", url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	steps := []struct {
		name     string
		do       func(t *testing.T)
		path     string
		want     int
		wantBody string // a substring
	}{
		{name: "serving", path: "/healthz", want: 200, wantBody: "ok"},
		{name: "admin API not on this port", path: "/faults", want: 404},
		{
			name: "Probe fails",
			do: func(t *testing.T) {
				if err := d.SetFaults([]faults.Rule{{Method: "Probe", Code: "FailedPrecondition", Message: "disk gone"}}); err != nil {
					t.Fatal(err)
				}
			},
			path: "/healthz", want: 503, wantBody: "disk gone",
		},
		{
			name: "Probe succeeds again",
			do: func(t *testing.T) {
				if err := d.SetFaults(nil); err != nil {
					t.Fatal(err)
				}
			},
			path: "/healthz", want: 200,
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.do != nil {
				s.do(t)
			}
			got, body, err := get(t, s.path)
			if err != nil || got != s.want || !strings.Contains(body, s.wantBody) {
				t.Errorf("GET %s = %d %q, %v; want %d with %q", s.path, got, body, err, s.want, s.wantBody)
			}
		})
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, body, err := get(t, "/healthz"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("GET /healthz after stop = %d %q, %v; want connection refused", got, body, err)
	}
}

// The health endpoint listens on any interface it is given, unlike the
// admin endpoint.
func TestHealthAddressAnyInterface(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d, _ := serve(t, func(c *Config) { c.HealthAddress = ":0" })
	host, port, err := net.SplitHostPort(strings.TrimPrefix(d.HealthURL(), "http://"))
	if err != nil || !net.ParseIP(host).IsUnspecified() {
		t.Fatalf("HealthURL() = %q (%v), want an unspecified host", d.HealthURL(), err)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:"+port+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d", resp.StatusCode)
	}
}
