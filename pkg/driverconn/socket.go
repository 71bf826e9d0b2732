package driverconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// errBadAddress is returned by SocketPath for an address csi-provisioner
// does not dial.
var errBadAddress = errors.New("unsupported CSI address")

const unixScheme = "unix://"

// SocketPath returns the path of the unix socket a CSI address names. Two
// forms are accepted: an absolute path (/run/csi/socket) and a unix URL with
// an absolute path (unix:///run/csi/socket). The CSI specification allows only
// unix domain sockets as plugin endpoints, and the provisioner notices a lost
// driver only on a unix socket (as csi-lib-utils does), so TCP (tcp://,
// host:port), other gRPC schemes and relative paths (relative to whatever
// directory the container starts in) are refused with an error that says
// which form to use.
func SocketPath(address string) (string, error) {
	const want = "give the driver's unix socket as an absolute path (/run/csi/socket) or a unix URL (unix:///run/csi/socket)"
	switch {
	case address == "":
		return "", fmt.Errorf("%w: the address is empty; %s", errBadAddress, want)
	case strings.HasPrefix(address, "/"):
		return filepath.Clean(address), nil
	case strings.HasPrefix(address, unixScheme):
		path := strings.TrimPrefix(address, unixScheme)
		if !strings.HasPrefix(path, "/") {
			return "", fmt.Errorf("%w: %q has a relative path (a unix URL has three slashes before an absolute path); %s",
				errBadAddress, address, want)
		}
		return filepath.Clean(path), nil
	case strings.HasPrefix(address, "unix:"):
		return "", fmt.Errorf("%w: %q is not a unix URL with an absolute path; %s", errBadAddress, address, want)
	}
	if scheme, _, ok := strings.Cut(address, "://"); ok {
		return "", fmt.Errorf("%w: %q: scheme %q is not supported, CSI drivers serve a local unix socket only; %s",
			errBadAddress, address, scheme+"://", want)
	}
	if _, _, err := net.SplitHostPort(address); err == nil {
		return "", fmt.Errorf("%w: %q looks like a TCP host:port, CSI drivers serve a local unix socket only; %s",
			errBadAddress, address, want)
	}
	return "", fmt.Errorf("%w: %q is a relative path; %s", errBadAddress, address, want)
}

// WaitForSocket returns the path of the unix socket address names (see
// SocketPath) once something accepts connections on it, or ctx's error.
// While it waits it logs why it cannot connect yet: the socket does not
// exist, nothing listens, or this process may not connect (with the uid,
// the owners and modes, and how to fix it).
func WaitForSocket(ctx context.Context, address string) (string, error) {
	path, err := SocketPath(address)
	if err != nil {
		return "", err
	}
	if err := waitForSocket(ctx, path, socketWait{}); err != nil {
		return "", fmt.Errorf("waiting for the CSI driver socket %s: %w", path, err)
	}
	return path, nil
}

// socketWait configures waitForSocket.
type socketWait struct {
	// Interval between two attempts to dial the socket. Default 1s.
	Interval time.Duration
	// LogInterval: while the socket keeps failing for the same reason, that
	// is logged again this often, with how long the wait has lasted.
	// Default 30s.
	LogInterval time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

func (w socketWait) withDefaults() socketWait {
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	if w.LogInterval <= 0 {
		w.LogInterval = 30 * time.Second
	}
	if w.Clock == nil {
		w.Clock = clock.RealClock{}
	}
	return w
}

// waitForSocket returns once something accepts connections on the unix
// socket at path, or with ctx's error. While it waits it says why, once per
// reason (the socket file does not exist yet, nothing listens on it, ...),
// and again every LogInterval with how long it has waited: a sidecar
// usually starts before its driver has created the socket.
func waitForSocket(ctx context.Context, path string, w socketWait) error {
	logger := klog.FromContext(ctx)
	w = w.withDefaults()
	start := w.Clock.Now()
	var last string
	var lastLog time.Time
	ticker := w.Clock.NewTicker(w.Interval)
	defer ticker.Stop()
	for {
		conn, err := (&net.Dialer{Timeout: w.Interval}).DialContext(ctx, "unix", path)
		if err == nil {
			conn.Close()
			if last != "" {
				logger.Info("CSI driver socket is up", "path", path, "waited", w.Clock.Since(start).Round(time.Second))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		reason := socketProblem(path, err)
		now := w.Clock.Now()
		switch {
		case reason != last:
			logger.Info(reason, "path", path)
			last, lastLog = reason, now
		case now.Sub(lastLog) >= w.LogInterval:
			logger.Info("Still waiting for the CSI driver", "path", path, "reason", reason, "waited", now.Sub(start).Round(time.Second))
			lastLog = now
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C():
		}
	}
}

// socketProblem says in one sentence why dialling the socket at path failed,
// and that the caller waits.
func socketProblem(path string, err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		if _, derr := os.Stat(filepath.Dir(path)); derr != nil {
			return fmt.Sprintf("Neither the CSI driver socket nor its directory %s exist yet (is the socket volume mounted?); waiting for the driver to create the socket", filepath.Dir(path))
		}
		return "CSI driver socket does not exist yet; waiting for the driver to create it"
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOTSOCK):
		if fi, serr := os.Stat(path); serr == nil && fi.Mode()&os.ModeSocket == 0 {
			return "CSI driver address is a file that is not a socket; waiting for the driver to replace it"
		}
		return "CSI driver socket exists but nothing listens on it (driver not started yet, or gone); waiting for the driver"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return permissionProblem(path, os.Getuid(), os.Getgid())
	default:
		return fmt.Sprintf("CSI driver socket cannot be dialled (%v); waiting for the driver", err)
	}
}

// permissionProblem says in one line why a process of uid and gid may not
// connect to the socket at path, and how to fix it. Connecting needs
// search permission on every directory above the socket and write
// permission on the socket itself; most CSI drivers run as root and create
// their socket 0755 (root:root), which only root may connect to.
func permissionProblem(path string, uid, gid int) string {
	return fmt.Sprintf("Cannot connect to the CSI driver socket: permission denied for uid %d gid %d (socket %s, directory %s); "+
		"run this container as the socket's owner (%s) "+
		"or have the driver make its socket group-writable and give both containers that group (runAsGroup or fsGroup); waiting",
		uid, gid, describeOwner(path), describeOwner(filepath.Dir(path)), ownerHint(socketOwner(path)))
}

// ownerHint is how to run as the owner of the socket at path (socketOwner):
// root, the image's default user, for a root driver's socket or when the
// owner is unknown. A socket of another user (a driver that runs as
// non-root) wants that user; root without capabilities, as the manifests
// run the sidecars, may not connect to it either: running the driver as
// root also works.
func ownerHint(uid uint32, known bool) string {
	if !known || uid == 0 {
		return "securityContext.runAsUser: 0, the image's default user"
	}
	return fmt.Sprintf("securityContext.runAsUser: %d, the driver's user; root without capabilities may not connect to another user's socket, so running the driver as root works too", uid)
}

// socketOwner is the uid that owns the file at path, if it can be read.
func socketOwner(path string) (uint32, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// describeOwner is "uid U gid G mode M" of the file at path, or why it
// cannot be read.
func describeOwner(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("not readable: %v", errors.Unwrap(err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "mode " + fi.Mode().String()
	}
	return fmt.Sprintf("uid %d gid %d mode %s", st.Uid, st.Gid, fi.Mode())
}
