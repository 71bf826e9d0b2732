package e2esource

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

const timeout = 2 * time.Minute

func cloneOf(src string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src}
	}
}

func restoreOf(snap string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		g := "snapshot.storage.k8s.io"
		c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: &g, Kind: "VolumeSnapshot", Name: snap}
	}
}

// volume returns the mock's volume with the handle.
func volume(t *testing.T, ctx context.Context, handle string) state.Volume {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == handle {
			return v
		}
	}
	t.Fatalf("the mock driver has no volume %q", handle)
	return state.Volume{}
}

// volumeCount is the number of volumes the mock driver has.
func volumeCount(t *testing.T, ctx context.Context) int {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(vols)
}

// createSnapshot calls the mock driver's CreateSnapshot, as the
// external-snapshotter sidecar would.
func createSnapshot(t *testing.T, ctx context.Context, name, volumeHandle string) *csi.Snapshot {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+env.ControllerSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeHandle})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	return resp.GetSnapshot()
}

func hasFinalizer(list []string, f string) bool {
	for _, x := range list {
		if x == f {
			return true
		}
	}
	return false
}
