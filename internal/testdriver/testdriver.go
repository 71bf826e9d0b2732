// Package testdriver serves the project's mock driver (mock-driver/driver)
// in-process on a unix socket for a test, and connects to it. For tests
// only: production packages must not import it.
package testdriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

// Start runs a mock driver with cfg until the test ends and returns it once
// it serves on cfg.Endpoint; it fails the test when the driver cannot be
// made or stops before it serves.
func Start(t testing.TB, ctx context.Context, cfg driver.Config) *driver.Driver {
	t.Helper()
	d, err := driver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("mock driver: %v", err)
	}
	return d
}

// StartController serves a mock driver controller on a socket in a new
// directory (named after prefix, removed when the test ends), with the zones
// z1, z2 and z3 of 10 GiB each unless mutate (which may be nil) changes its
// configuration, and returns it with a Controller client connected to it.
func StartController(t testing.TB, ctx context.Context, prefix string, mutate func(*driver.Config)) (*driver.Driver, csi.ControllerClient) {
	t.Helper()
	// Not t.TempDir(): a unix socket's path must stay short.
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "csi.sock")
	const gi = int64(1) << 30
	cfg := driver.Config{
		Endpoint: endpoint,
		Mode:     driver.ModeController,
		Segments: []driver.SegmentConfig{
			{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 10 * gi},
			{Topology: map[string]string{"zone": "z2"}, CapacityBytes: 10 * gi},
			{Topology: map[string]string{"zone": "z3"}, CapacityBytes: 10 * gi},
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d := Start(t, ctx, cfg)
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return d, csi.NewControllerClient(conn)
}
