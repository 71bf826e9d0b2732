package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "driver", args: []string{"--driver-name=lvm.example.com"}},
		{name: "leader election", args: []string{"--driver-name=d", "--leader-election", "--leader-election-namespace=kube-system"}},
		{name: "version without driver", args: []string{"--version"}},
		{name: "no driver", wantErr: "--driver-name is required"},
		{name: "renew deadline past the lease", args: []string{"--driver-name=d", "--leader-election", "--leader-election-renew-deadline=20s"},
			wantErr: "--leader-election-renew-deadline must be below"},
		{name: "no workers", args: []string{"--driver-name=d", "--worker-threads=0"}, wantErr: "--worker-threads must be positive"},
		{name: "argument", args: []string{"--driver-name=d", "extra"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseArgs(tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestLeaseName(t *testing.T) {
	for driver, want := range map[string]string{
		"lvm.csi.Example.com": "csi-node-router-lvm-csi-example-com",
		"local_driver.":       "csi-node-router-local-driver",
	} {
		if got := leaseName(driver); got != want {
			t.Errorf("leaseName(%q) = %q, want %q", driver, got, want)
		}
	}
}

func TestHTTPHandler(t *testing.T) {
	synced := false
	h := httpHandler(func() bool { return synced }, metrics.NewKubeRegistry())
	for _, tc := range []struct {
		path   string
		synced bool
		want   int
	}{
		{"/healthz", false, http.StatusOK},
		{"/readyz", false, http.StatusServiceUnavailable},
		{"/readyz", true, http.StatusOK},
		{"/metrics", false, http.StatusOK},
	} {
		synced = tc.synced
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.want {
			body, _ := io.ReadAll(rec.Body)
			t.Errorf("GET %s (synced %t): %d %s, want %d", tc.path, tc.synced, rec.Code, body, tc.want)
		}
	}
}
