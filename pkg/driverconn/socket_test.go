package driverconn

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

func TestSocketPath(t *testing.T) {
	tests := []struct {
		name    string
		address string
		want    string
		wantErr string
	}{
		{name: "absolute path", address: "/run/csi/socket", want: "/run/csi/socket"},
		{name: "unix URL", address: "unix:///run/csi/socket", want: "/run/csi/socket"},
		{name: "unix URL cleaned", address: "unix:///run//csi/./socket", want: "/run/csi/socket"},
		{name: "empty", address: "", wantErr: "the address is empty"},
		{name: "tcp URL", address: "tcp://10.0.0.1:10000", wantErr: `scheme "tcp://" is not supported`},
		{name: "dns URL", address: "dns:///driver:10000", wantErr: `scheme "dns://" is not supported`},
		{name: "host and port", address: "localhost:10000", wantErr: "looks like a TCP host:port"},
		{name: "relative path", address: "csi.sock", wantErr: "is a relative path"},
		{name: "unix URL with a relative path", address: "unix://csi.sock", wantErr: "has a relative path"},
		{name: "unix without slashes", address: "unix:csi.sock", wantErr: "not a unix URL with an absolute path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SocketPath(tc.address)
			if tc.wantErr != "" {
				if !errors.Is(err, errBadAddress) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SocketPath(%q) error = %v, want errBadAddress with %q", tc.address, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "unix:///run/csi/socket") {
					t.Errorf("error %q does not say which form to use", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SocketPath(%q) = %q, %v; want %q", tc.address, got, err, tc.want)
			}
		})
	}
}

// shortDir returns a temporary directory whose name is short enough for a
// unix socket path.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestSocketProblem(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		path    func(dir string) string
		want    string
	}{
		{name: "no socket file", want: "CSI driver socket does not exist yet; waiting for the driver to create it"},
		{name: "no directory", path: func(dir string) string { return filepath.Join(dir, "missing", "csi.sock") },
			want: "Neither the CSI driver socket nor its directory"},
		{name: "stale socket", prepare: func(t *testing.T, path string) {
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
		}, want: "CSI driver socket exists but nothing listens on it"},
		{name: "regular file", prepare: func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "is a file that is not a socket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			path := filepath.Join(dir, "csi.sock")
			if tc.path != nil {
				path = tc.path(dir)
			}
			if tc.prepare != nil {
				tc.prepare(t, path)
			}
			_, err := net.Dial("unix", path)
			if err == nil {
				t.Fatal("dial succeeded")
			}
			if got := socketProblem(path, err); !strings.Contains(got, tc.want) {
				t.Errorf("socketProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

// waitForSocket says once that the socket is missing, says again after
// LogInterval that it still waits, and returns once the driver listens.
func TestWaitForSocket(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	path := filepath.Join(shortDir(t), "csi.sock")
	clock := testingclock.NewFakeClock(time.Now())
	done := make(chan error, 1)
	go func() {
		done <- waitForSocket(ctx, path, socketWait{Interval: time.Second, LogInterval: 3 * time.Second, Clock: clock})
	}()
	// Step the fake clock until the goroutine has waited long enough.
	stepUntil := func(cond func() bool) error {
		return wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			if cond() {
				return true, nil
			}
			clock.Step(time.Second)
			return false, nil
		})
	}
	if err := stepUntil(func() bool { return strings.Contains(logs.String(), "Still waiting for the CSI driver") }); err != nil {
		t.Fatalf("never said it still waits: %v; logs:\n%s", err, logs.String())
	}
	if n := strings.Count(logs.String(), "INFO CSI driver socket does not exist yet"); n != 1 {
		t.Errorf("said %d times that the socket does not exist, want once; logs:\n%s", n, logs.String())
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var waitErr error
	returned := func() bool {
		select {
		case waitErr = <-done:
			return true
		default:
			return false
		}
	}
	if err := stepUntil(returned); err != nil {
		t.Fatalf("waitForSocket did not return once the socket listened: %v", err)
	}
	if waitErr != nil {
		t.Errorf("waitForSocket = %v, want nil", waitErr)
	}
}

// TestOwnerHint: the hint names the socket's owner, which is root for most
// drivers, but not for a driver that runs as its image's non-root user
// (as the mock controller once did in deploy/'s quick start, where root
// without capabilities was told to run as root).
func TestOwnerHint(t *testing.T) {
	tests := []struct {
		name  string
		uid   uint32
		known bool
		want  string
	}{
		{name: "root's socket", uid: 0, known: true, want: "securityContext.runAsUser: 0, the image's default user"},
		{name: "owner unknown", uid: 0, known: false, want: "securityContext.runAsUser: 0, the image's default user"},
		{name: "non-root driver's socket", uid: 65532, known: true, want: "securityContext.runAsUser: 65532, the driver's user; root without capabilities may not connect to another user's socket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownerHint(tc.uid, tc.known); !strings.HasPrefix(got, tc.want) {
				t.Errorf("ownerHint(%d, %v) = %q, want it to start with %q", tc.uid, tc.known, got, tc.want)
			}
		})
	}
	t.Run("a real socket", func(t *testing.T) {
		path := filepath.Join(shortDir(t), "csi.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		want := ownerHint(uint32(os.Getuid()), true)
		if got := permissionProblem(path, 65533, 65533); !strings.Contains(got, "socket's owner ("+want+")") {
			t.Errorf("permissionProblem = %q, want the hint %q", got, want)
		}
	})
}
