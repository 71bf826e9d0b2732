package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

// binDirEnv names a directory of freshly built project binaries (`make
// test` sets it); without it the test builds the mock driver itself.
const binDirEnv = "CSI_TOPOLOGY_TEST_BIN_DIR"

// mockDriverBinary returns the path of a mock-driver binary built from this
// checkout.
func mockDriverBinary(ctx context.Context, t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(binDirEnv); dir != "" {
		if fi, err := os.Stat(filepath.Join(dir, "mock-driver")); err == nil && fi.Mode()&0o111 != 0 {
			return filepath.Join(dir, "mock-driver")
		}
	}
	bin := filepath.Join(t.TempDir(), "mock-driver")
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the mock driver: %v\n%s", err, out)
	}
	return bin
}

// controllerProcess is a mock-driver controller process with its client.
type controllerProcess struct {
	cmd *exec.Cmd
	csi.ControllerClient
}

// startController starts the binary as a controller on dir's socket and
// state file and waits until it answers.
func startController(ctx context.Context, t *testing.T, bin, dir string) *controllerProcess {
	t.Helper()
	socket := filepath.Join(dir, "csi.sock")
	segments := filepath.Join(dir, "segments.json")
	if err := os.WriteFile(segments, []byte(`{"segments":[{"topology":{"zone":"z1"}},{"topology":{"zone":"z2"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode=controller", "--endpoint=unix://"+socket, "--segments-file="+segments,
		"--state-file="+filepath.Join(dir, "state.json"), "-v=2")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{cmd: cmd}
	t.Cleanup(func() { p.kill(t) })
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.ControllerClient = csi.NewControllerClient(conn)
	identity := csi.NewIdentityClient(conn)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := identity.Probe(ctx, &csi.ProbeRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the mock driver does not answer: %v", err)
	}
	return p
}

// kill sends SIGKILL (no graceful stop, no deferred code) and reaps the
// process; killing an ended process does nothing.
func (p *controllerProcess) kill(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Errorf("killing the mock driver: %v", err)
	}
	_ = p.cmd.Wait()
}

func createReq(name string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	}
}

// Whatever a mock-driver answered survives a SIGKILL right after the
// answer: the restarted process, on the same state file, knows every
// volume and snapshot it created and forgets every volume it deleted, also
// when the kill hits while calls are running.
func TestStateSurvivesSIGKILL(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	bin := mockDriverBinary(ctx, t)
	dir, err := os.MkdirTemp("", "mockkill") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// Sequential calls, then the kill right after the last answer.
	first := startController(ctx, t, bin, dir)
	ids := map[string]string{} // volume name -> ID
	for _, name := range []string{"a", "b", "c"} {
		resp, err := first.CreateVolume(ctx, createReq(name))
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = resp.GetVolume().GetVolumeId()
	}
	snap, err := first.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-a", SourceVolumeId: ids["a"]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ids["b"]}); err != nil {
		t.Fatal(err)
	}
	first.kill(t)

	// Concurrent creators, killed while they run.
	second := startController(ctx, t, bin, dir)
	var mu sync.Mutex
	created := map[string]bool{} // IDs answered OK
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				resp, err := second.CreateVolume(ctx, createReq(fmt.Sprintf("w-%d-%d", g, i)))
				if err != nil {
					return // the process is gone
				}
				mu.Lock()
				created[resp.GetVolume().GetVolumeId()] = true
				mu.Unlock()
			}
		}()
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(created) >= 20, nil
	})
	if err != nil {
		t.Fatalf("the creators made %d volumes: %v", len(created), err)
	}
	second.kill(t)
	wg.Wait()

	third := startController(ctx, t, bin, dir)
	list, err := third.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	segment := map[string]string{} // by volume ID
	for _, e := range list.GetEntries() {
		listed[e.GetVolume().GetVolumeId()] = true
		segment[e.GetVolume().GetVolumeId()] = e.GetVolume().GetVolumeContext()[driver.ContextSegment]
	}
	for id := range created {
		if !listed[id] {
			t.Errorf("volume %s, answered before the kill, is gone after the restart", id)
		}
	}
	if !listed[ids["a"]] || !listed[ids["c"]] || listed[ids["b"]] {
		t.Errorf("after the restart the volumes are %v; want %s and %s, not the deleted %s", listed, ids["a"], ids["c"], ids["b"])
	}
	again, err := third.CreateVolume(ctx, createReq("a"))
	if err != nil || again.GetVolume().GetVolumeId() != ids["a"] {
		t.Errorf("re-create of a = %v, %v; want %s", again, err, ids["a"])
	}
	snaps, err := third.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps.GetEntries()) != 1 || snaps.GetEntries()[0].GetSnapshot().GetSnapshotId() != snap.GetSnapshot().GetSnapshotId() {
		t.Errorf("snapshots after the restart %v, want %s", snaps.GetEntries(), snap.GetSnapshot().GetSnapshotId())
	}
	// The snapshot still knows its segment: a restore goes where a was.
	restore := createReq("restore")
	restore.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}
	restored, err := third.CreateVolume(ctx, restore)
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.GetVolume().GetVolumeContext()[driver.ContextSegment]; got != segment[ids["a"]] {
		t.Errorf("restore in segment %q, want a's, %q", got, segment[ids["a"]])
	}
	if listed[restored.GetVolume().GetVolumeId()] {
		t.Errorf("the restore got the ID of an existing volume, %s", restored.GetVolume().GetVolumeId())
	}
}
