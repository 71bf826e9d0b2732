package images

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testdriver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// nonRoot is the uid and gid of a sidecar someone runs as non-root.
const nonRoot = "65532:65532"

// The sidecars that dial a CSI driver's socket, run as their image's user
// (imagebuild.UserOf) with their default flags, connect to a driver that
// runs as root and made its socket 0755 in a 0755 directory, as most
// drivers do in their shared emptyDir: a vendor who swaps only the image
// connects. Run as non-root, they say in one line what is wrong and how to
// fix it before they wait. A driver whose Probe takes 3 s is waited for
// (the start-up Probe is bounded by --timeout, 10 s, as upstream's).
func TestSidecarsReachRootDriverSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the driver's socket is root's, and the sidecars run as other users")
	}
	dir := sharedDir(t)
	bin := buildSidecars(t, dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Nothing listens on port 1: the sidecars only read this file before
	// they connect to the driver.
	writeShared(t, kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`))
	const (
		connected = `"Connected to CSI driver"`
		denied    = `"Cannot connect to the CSI driver socket: permission denied for uid 65532 gid 65532 (socket uid 0 gid 0 mode Srwxr-xr-x, directory uid 0 gid 0 mode drwxr-xr-x); run this container as the socket's owner (securityContext.runAsUser: 0, the image's default user)`
	)
	for _, tc := range []struct {
		name, binary string
		// user is "uid:gid"; empty runs as the image's user.
		user       string
		probeDelay time.Duration
		want       string
	}{
		{name: "csi-provisioner as its image's user", binary: "csi-provisioner", want: connected},
		{name: "csi-node-publisher as its image's user", binary: "csi-node-publisher", want: connected},
		{name: "csi-provisioner as non-root", binary: "csi-provisioner", user: nonRoot, want: denied},
		{name: "csi-node-publisher as non-root", binary: "csi-node-publisher", user: nonRoot, want: denied},
		{name: "csi-provisioner, Probe takes 3s", binary: "csi-provisioner", probeDelay: 3 * time.Second, want: connected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := filepath.Join(dir, "csi.sock")
			startRootDriver(t, socket, tc.probeDelay)
			user := tc.user
			if user == "" {
				user = imagebuild.UserOf(tc.binary)
			}
			args := []string{"--csi-address=unix://" + socket, "--kubeconfig=" + kubeconfig}
			if tc.binary == "csi-node-publisher" {
				args = append(args, "--node-name=n1", "--lease-duration=0")
			}
			line, err := waitForLine(t, filepath.Join(bin, tc.binary), args, user, tc.want)
			if err != nil {
				t.Fatalf("%s as %s: %v", tc.binary, user, err)
			}
			t.Logf("%s as %s: %s", tc.binary, user, line)
		})
	}
}

// sharedDir is a directory of root's, 0755, that other users may search, as
// a pod's emptyDir is.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeShared writes a file every user may read and run.
func writeShared(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// buildSidecars builds the sidecars with the project's tags and copies them
// into dir/bin, where other users may run them.
func buildSidecars(t *testing.T, dir string) string {
	t.Helper()
	built := t.TempDir()
	var pkgs []string
	for _, b := range imagebuild.DriverSocketClients {
		pkgs = append(pkgs, "./cmd/"+b)
	}
	if err := controlplane.BuildProject(t.Context(), repoRoot(t), built, pkgs...); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range imagebuild.DriverSocketClients {
		data, err := os.ReadFile(filepath.Join(built, b))
		if err != nil {
			t.Fatal(err)
		}
		writeShared(t, filepath.Join(bin, b), data)
	}
	return bin
}

// startRootDriver serves the mock driver (controller and node) in-process,
// as root, on socket with mode 0755, its Probe delayed by probeDelay.
func startRootDriver(t *testing.T, socket string, probeDelay time.Duration) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	cfg := driver.Config{Endpoint: "unix://" + socket, Mode: driver.ModeBoth, NodeID: "n1",
		Segments: []driver.SegmentConfig{{Topology: map[string]string{"zone": "z1"}, CapacityBytes: 1 << 30}}}
	if probeDelay > 0 {
		cfg.Faults = []faults.Rule{{Method: "Probe", Latency: faults.Duration(probeDelay)}}
	}
	testdriver.Start(t, ctx, cfg)
	if err := os.Chmod(socket, 0o755); err != nil {
		t.Fatal(err)
	}
}

// waitForLine runs exe with args as user ("uid:gid") until a line of its
// output contains want, and returns that line; it fails after a minute, or
// when the process ends first.
func waitForLine(t *testing.T, exe string, args []string, user, want string) (string, error) {
	t.Helper()
	uid, gid, err := parseUser(user)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = filepath.Dir(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	var seen []string
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, want) {
			return line, nil
		}
		seen = append(seen, line)
	}
	return "", fmt.Errorf("no line with %q within a minute or before the process ended (%v); output:\n%s",
		want, ctx.Err(), strings.Join(seen, "\n"))
}

// parseUser reads an image config's "uid:gid".
func parseUser(user string) (uid, gid uint32, err error) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		return 0, 0, fmt.Errorf("user %q is not uid:gid", user)
	}
	un, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", user, err)
	}
	gn, err := strconv.ParseUint(g, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", user, err)
	}
	return uint32(un), uint32(gn), nil
}
