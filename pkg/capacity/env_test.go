package capacity

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	testDriver = driver.DefaultName
	zoneKey    = driver.TopologyPrefix + "zone"
	gi         = int64(1) << 30
)

// startMock serves a mock driver controller in-process on a unix socket,
// with the zones z1, z2 and z3 of 10 GiB each.
func startMock(t *testing.T, ctx context.Context) (*driver.Driver, csi.ControllerClient) {
	t.Helper()
	dir, err := os.MkdirTemp("", "capacity")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "csi.sock")
	cfg := driver.Config{
		Endpoint: "unix://" + socket,
		Mode:     driver.ModeController,
		Segments: []driver.SegmentConfig{
			{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 10 * gi},
			{Topology: map[string]string{"zone": "z2"}, CapacityBytes: 10 * gi},
			{Topology: map[string]string{"zone": "z3"}, CapacityBytes: 10 * gi},
		},
	}
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
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return d, csi.NewControllerClient(conn)
}

func zoneTopo(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: map[string]string{zoneKey: z}})
	}
	return out
}

func makeNode(name, zone string) *v1.Node {
	labels := map[string]string{}
	if zone != "" {
		labels[zoneKey] = zone
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func makeCSINode(name string, keys ...string) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: testDriver, NodeID: name, TopologyKeys: keys},
		}},
	}
}

type classBuilder struct{ *storagev1.StorageClass }

func makeClass(name string) classBuilder {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	return classBuilder{&storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       testDriver,
		VolumeBindingMode: &mode,
	}}
}

func (c classBuilder) immediate() classBuilder {
	mode := storagev1.VolumeBindingImmediate
	c.VolumeBindingMode = &mode
	return c
}

func (c classBuilder) withParams(kv ...string) classBuilder {
	c.Parameters = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Parameters[kv[i]] = kv[i+1]
	}
	return c
}
