package driver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"
)

const gi = int64(1) << 30

// zone is the normalized segment of a zone.
func zone(z string) map[string]string { return map[string]string{TopologyPrefix + "zone": z} }

// topo returns the topologies of zones.
func topo(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: zone(z)})
	}
	return out
}

func capability(block bool, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	return c
}

func mountCap() *csi.VolumeCapability {
	return capability(false, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
}

// createReq builds a CreateVolumeRequest.
type createReq struct{ *csi.CreateVolumeRequest }

func makeCreate(name string, size int64) createReq {
	return createReq{&csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
	}}
}

func (r createReq) requisite(zones ...string) createReq {
	if r.AccessibilityRequirements == nil {
		r.AccessibilityRequirements = &csi.TopologyRequirement{}
	}
	r.AccessibilityRequirements.Requisite = topo(zones...)
	return r
}

func (r createReq) preferred(zones ...string) createReq {
	if r.AccessibilityRequirements == nil {
		r.AccessibilityRequirements = &csi.TopologyRequirement{}
	}
	r.AccessibilityRequirements.Preferred = topo(zones...)
	return r
}

func (r createReq) params(p map[string]string) createReq {
	r.Parameters = p
	return r
}

// testConfig is a controller with zones z1 and z2 of 2 GiB and a full z3.
func testConfig(t *testing.T) Config {
	return Config{
		Endpoint: "unix://" + filepath.Join(socketDir(t), "csi.sock"),
		Mode:     ModeController,
		Segments: []SegmentConfig{
			{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 2 * gi},
			{Topology: map[string]string{"zone": "z2"}, CapacityBytes: 2 * gi},
			{Topology: map[string]string{"zone": "z3"}, CapacityBytes: 0},
		},
	}
}

// socketDir returns a short temporary directory: t.TempDir's names, made of
// the test's name, can exceed the 108 bytes of a unix socket path.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newTestDriver returns a driver of testConfig changed by mutate, for
// in-process calls.
func newTestDriver(t *testing.T, mutate func(*Config)) *Driver {
	t.Helper()
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// clients are the CSI clients of a served driver.
type clients struct {
	csi.IdentityClient
	csi.ControllerClient
	node csi.NodeClient
}

// serve runs a driver of testConfig changed by mutate until the test ends
// and returns it with clients connected to its socket.
func serve(t *testing.T, mutate func(*Config)) (*Driver, clients) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, mutate)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	return dial(t, d)
}

// dial connects clients to a driver's socket until the test ends.
func dial(t *testing.T, d *Driver) (*Driver, clients) {
	t.Helper()
	conn, err := grpc.NewClient(d.cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return d, clients{csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)}
}
