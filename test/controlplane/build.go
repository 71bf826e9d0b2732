package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Binaries are the paths of the control-plane commands.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler string
}

// RepoRoot returns the directory of the project's go.mod, searching upwards
// from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isProjectModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("project go.mod not found above the working directory")
		}
		dir = parent
	}
}

func isProjectModule(gomod []byte) bool {
	const mod = "module github.com/csi-topology-provisioner/csi-topology-provisioner\n"
	return len(gomod) >= len(mod) && string(gomod[:len(mod)]) == mod
}

// ControlPlaneDir returns where the control-plane binaries of this checkout
// are cached: <user cache dir>/csi-topology-provisioner/controlplane/<key>,
// where key hashes the nested module (go.mod, go.sum, the etcd main) and the
// Go version, so that every clone of the same commit shares one build. When
// the user has no cache directory it is <repo>/.cache/controlplane/<key>.
func ControlPlaneDir(repoRoot string) (string, error) {
	modDir := filepath.Join(repoRoot, "test", "controlplane", "k8s")
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", filepath.Join("etcd", "main.go")} {
		data, err := os.ReadFile(filepath.Join(modDir, f))
		if err != nil {
			return "", err
		}
		h.Write(data)
	}
	h.Write([]byte(runtime.Version()))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	base, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(repoRoot, ".cache", "controlplane", key), nil
	}
	return filepath.Join(base, "csi-topology-provisioner", "controlplane", key), nil
}

// BuildControlPlane builds etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler from the nested module test/controlplane/k8s, unless a
// complete build for the same go.sum is cached. Concurrent callers (test
// packages run in parallel) wait for each other on a file lock.
func BuildControlPlane(ctx context.Context, repoRoot string) (Binaries, error) {
	logger := klog.FromContext(ctx)
	modDir := filepath.Join(repoRoot, "test", "controlplane", "k8s")
	dir, err := ControlPlaneDir(repoRoot)
	if err != nil {
		return Binaries{}, err
	}
	bins := Binaries{
		Etcd:              filepath.Join(dir, "etcd"),
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	stamp := filepath.Join(dir, ".complete")
	if _, err := os.Stat(stamp); err == nil {
		return bins, nil
	}
	start := time.Now()
	logger.Info("Building the control plane (cached afterwards)", "dir", dir)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./etcd", "k8s.io/kubernetes/cmd/kube-apiserver",
		"k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kube-scheduler")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("building the control plane: %w\n%s", err, out)
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		return Binaries{}, err
	}
	logger.Info("Built the control plane", "duration", time.Since(start).Round(time.Second))
	return bins, nil
}

// BuildProject builds the project's commands (e.g. "./cmd/mock-driver")
// into outDir; Go's build cache makes repeated builds cheap.
func BuildProject(ctx context.Context, repoRoot, outDir string, pkgs ...string) error {
	args := append([]string{"build", "-o", outDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
