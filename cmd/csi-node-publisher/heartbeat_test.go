package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodepublisher"
)

func TestHeartbeatFlags(t *testing.T) {
	t.Setenv("NAMESPACE", "from-env")
	t.Setenv("NODE_NAME", "n1")
	tests := []struct {
		name    string
		args    []string
		want    heartbeat.Config
		wantErr string
	}{
		{name: "defaults", want: heartbeat.Config{NodeName: "n1", Namespace: "from-env", LeaseDuration: 60 * time.Second}},
		{
			name: "flags", args: []string{"--lease-duration=20s", "--lease-renew-interval=5s", "--lease-namespace=ns", "--node-name=n2"},
			want: heartbeat.Config{NodeName: "n2", Namespace: "ns", LeaseDuration: 20 * time.Second, RenewInterval: 5 * time.Second},
		},
		{name: "disabled", args: []string{"--lease-duration=0"}, want: heartbeat.Config{NodeName: "n1", Namespace: "from-env"}},
		{name: "negative", args: []string{"--lease-duration=-1s"}, wantErr: "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := parseArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("parseFlags = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.heartbeat != tc.want {
				t.Errorf("heartbeat config %+v, want %+v", c.heartbeat, tc.want)
			}
		})
	}
}

func TestLeaseNamespace(t *testing.T) {
	dir := t.TempDir()
	saFile := filepath.Join(dir, "namespace")
	if err := os.WriteFile(saFile, []byte("csi-driver-ns\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, flag, file, want, wantErr string
	}{
		{name: "flag or $NAMESPACE wins", flag: "ns", file: saFile, want: "ns"},
		{name: "the pod's service account namespace", file: saFile, want: "csi-driver-ns"},
		{name: "neither: an error naming the ways out", file: filepath.Join(dir, "missing"), wantErr: "--lease-duration=0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaseNamespace(tc.flag, tc.file)
			if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("leaseNamespace = %q, %v; want %q, error with %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A heartbeat configuration error ends run before it waits for the driver.
func TestRunRefusesBadHeartbeat(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := config{csiAddress: filepath.Join(shortTempDir(t), "csi.sock"), kubeconfig: writeKubeconfig(t), kubeAPIQPS: 5, kubeAPIBurst: 10,
		publisher: nodepublisher.PublisherConfig{NodeName: "n1"},
		heartbeat: heartbeat.Config{NodeName: "n1", Namespace: "ns", LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second}}
	start := time.Now()
	if err := run(ctx, cfg); err == nil || !strings.Contains(err.Error(), "--lease-renew-interval") {
		t.Errorf("run = %v, want an error about --lease-renew-interval", err)
	}
	// Connecting to the missing driver would take 30 s.
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("run took %s: it waited for the driver", d)
	}
}
