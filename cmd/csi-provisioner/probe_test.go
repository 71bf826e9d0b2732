package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testdriver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
)

// Each start-up Probe is bounded by --timeout (10 s), as upstream's, unless
// --probe-timeout says otherwise; a driver whose Probe takes 3 s is
// connected with the default flags, and volumes are provisioned through
// that connection.
func TestStartupProbeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		want  time.Duration
		delay time.Duration
	}{
		{name: "default is --timeout's default", want: 10 * time.Second, delay: 3 * time.Second},
		{name: "follows --timeout", args: []string{"--timeout=20s"}, want: 20 * time.Second},
		{name: "--probe-timeout wins", args: []string{"--timeout=20s", "--probe-timeout=2s"}, want: 2 * time.Second},
		{name: "--probe-timeout=0 is --timeout", args: []string{"--timeout=5s", "--probe-timeout=0"}, want: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := parseArgs(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.probeTimeout != tc.want {
				t.Errorf("start-up Probe timeout %s, want %s", cfg.probeTimeout, tc.want)
			}
			if tc.delay == 0 {
				return
			}
			connectSlowProbe(t, cfg, tc.delay)
		})
	}
}

// connectSlowProbe serves the mock driver with every Probe delayed by
// delay, connects as csi-provisioner does at start-up, and creates a
// volume through the connection.
func connectSlowProbe(t *testing.T, cfg config, delay time.Duration) {
	_, ctx := ktesting.NewTestContext(t)
	dir, err := os.MkdirTemp("", "probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "csi.sock")
	testdriver.Start(t, ctx, driver.Config{Endpoint: "unix://" + socket, Mode: driver.ModeController,
		Segments: []driver.SegmentConfig{{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 1 << 30}},
		Faults:   []faults.Rule{{Method: "Probe", Latency: faults.Duration(delay)}}})

	// Bounded, so that a Probe timeout shorter than the delay (retried
	// forever) fails the test instead of hanging it.
	connectCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, info, err := driverconn.Connect(connectCtx, "unix://"+socket, nil, cfg.probeTimeout)
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		t.Fatalf("connecting to a driver whose Probe takes %s: %v", delay, err)
	}
	if info.Name != driver.DefaultName {
		t.Errorf("driver name %q, want %q", info.Name, driver.DefaultName)
	}
	created, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:          "pvc-slow-probe",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil || created.GetVolume().GetVolumeId() == "" {
		t.Fatalf("CreateVolume after a slow Probe: %v, %v", created, err)
	}
}
