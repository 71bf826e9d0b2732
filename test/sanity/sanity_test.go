package sanity

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

// TestSanity runs the whole csi-sanity suite against a mock driver serving
// controller and node on one socket, with a segment table, persisted state
// and an attach limit (so TestNodeVolumeAttachLimit runs), with snapshots,
// cloning and volume modification (so their specs run).
func TestSanity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir := t.TempDir() // "/tmp/TestSanity<n>/001": short enough for a socket path
	socket := filepath.Join(dir, "csi.sock")
	d, err := driver.New(driver.Config{
		Endpoint:          "unix://" + socket,
		Mode:              driver.ModeBoth,
		NodeID:            "sanity-node",
		NodeTopology:      map[string]string{"zone": "z1"},
		MaxVolumesPerNode: 4,
		StateFile:         filepath.Join(dir, "state.json"),
		Segments: []driver.SegmentConfig{
			{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 1 << 40},
			{Topology: map[string]string{"zone": "z2"}, CapacityBytes: 1 << 40},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("driver did not start: %v", err)
	}

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + socket
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 1 << 30
	cfg.TestNodeVolumeAttachLimit = true
	cfg.IdempotentCount = 2
	cfg.TestVolumeParameters = map[string]string{"type": "sanity"}
	cfg.TestSnapshotParameters = map[string]string{"kind": "sanity"}
	cfg.TestVolumeMutableParameters = map[string]string{"iops": "3000"}
	sanity.Test(t, cfg)

	// csi-sanity deletes what it created: nothing may be left, also not in
	// the state file a restarted driver would load.
	if vols := d.Volumes(); len(vols) != 0 {
		t.Errorf("%d volumes left after csi-sanity, e.g. %+v", len(vols), vols[0])
	}
	if snaps := d.Snapshots(); len(snaps) != 0 {
		t.Errorf("%d snapshots left after csi-sanity, e.g. %+v", len(snaps), snaps[0])
	}
	restarted, err := driver.New(driver.Config{Endpoint: "unix://" + socket, Mode: driver.ModeController, StateFile: filepath.Join(dir, "state.json")})
	if err != nil {
		t.Fatal(err)
	}
	if vols := restarted.Volumes(); len(vols) != 0 {
		t.Errorf("the state file holds %d volumes after csi-sanity", len(vols))
	}
	if snaps := restarted.Snapshots(); len(snaps) != 0 {
		t.Errorf("the state file holds %d snapshots after csi-sanity", len(snaps))
	}
}
