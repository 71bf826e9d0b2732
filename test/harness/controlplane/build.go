package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Binaries are the paths of the control-plane commands.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler string
}

// Dir is the directory that holds the binaries.
func (b Binaries) Dir() string { return filepath.Dir(b.Etcd) }

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
// where key hashes the nested module (go.mod without its module line, go.sum,
// the etcd main) and the Go version, so that every clone of the same commit
// shares one build, wherever the module lives (CacheDir). When
// the user has no cache directory it is <repo>/.cache/controlplane/<key>.
func ControlPlaneDir(repoRoot string) (string, error) {
	mod := filepath.Join("test", "harness", "controlplane", "k8s")
	return CacheDir(repoRoot, "controlplane", runtime.Version(),
		filepath.Join(mod, "go.mod"), filepath.Join(mod, "go.sum"), filepath.Join(mod, "etcd", "main.go"))
}

// CacheDir is where a build of this checkout is cached:
// <user cache dir>/csi-topology-provisioner/<name>/<key> (<repo>/.cache/<name>/<key>
// without a user cache dir), where key hashes the contents of the files
// (paths relative to repoRoot), in order, then salt (the Go version, and
// what else changes the build). A go.mod is hashed without its module
// line: that line names where the nested module lives, which does not
// change what it builds, so moving or renaming a nested module keeps its
// cached build.
func CacheDir(repoRoot, name, salt string, files ...string) (string, error) {
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			return "", err
		}
		if filepath.Base(f) == "go.mod" {
			data = withoutModuleLine(data)
		}
		h.Write(data)
	}
	h.Write([]byte(salt))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	base, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(repoRoot, ".cache", name, key), nil
	}
	return filepath.Join(base, "csi-topology-provisioner", name, key), nil
}

// withoutModuleLine returns gomod without its module directive.
func withoutModuleLine(gomod []byte) []byte {
	var out []byte
	for line := range bytes.Lines(gomod) {
		if fields := bytes.Fields(line); len(fields) > 0 && string(fields[0]) == "module" {
			continue
		}
		out = append(out, line...)
	}
	return out
}

// BuildControlPlane builds etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler from the nested module test/harness/controlplane/k8s, unless a
// complete build is cached in ControlPlaneDir (same nested module, same Go). Concurrent callers (test
// packages run in parallel) wait for each other on a file lock.
func BuildControlPlane(ctx context.Context, repoRoot string) (Binaries, error) {
	modDir := filepath.Join(repoRoot, "test", "harness", "controlplane", "k8s")
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
	err = CachedBuild(ctx, dir, "the control plane",
		"Building the control plane (cached afterwards; about 5 minutes on 2 cores when the Kubernetes libraries are not compiled yet)",
		func() error { return goBuildWithProgress(ctx, "the control plane", modDir, dir, controlPlaneTargets) })
	if err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

var controlPlaneTargets = []string{"./etcd", "k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kube-scheduler"}

// progressEvery is how often a long build says how far it is.
const progressEvery = 30 * time.Second

// goBuildWithProgress runs `go build -v` of targets in modDir into outDir and
// logs, every progressEvery, how many of the targets' packages were compiled
// (the rest come from Go's build cache). On failure the error carries the
// output that was not a package name.
func goBuildWithProgress(ctx context.Context, what, modDir, outDir string, targets []string) error {
	return GoBuildWithProgress(ctx, what, modDir, outDir, "", targets)
}

// GoBuildWithProgress is goBuildWithProgress for other test packages, with
// build tags (comma-separated, empty for none): `go build -v -ldflags=-s -w`
// of targets in modDir into outDir, logging every 30 s how far it is.
func GoBuildWithProgress(ctx context.Context, what, modDir, outDir, tags string, targets []string) error {
	logger := klog.FromContext(ctx)
	total := 0
	list, cleanup := goCommand(ctx, modDir, append([]string{"list", "-deps"}, targets...)...)
	out, err := list.Output()
	cleanup()
	if err == nil {
		total = bytes.Count(out, []byte("\n"))
	}
	// No DWARF (-s -w): the binaries are run, never debugged, and the four
	// links take a third less time.
	args := []string{"build", "-v", "-ldflags=-s -w", "-o", outDir + string(filepath.Separator)}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd, cleanup := goCommand(ctx, modDir, append(args, targets...)...)
	defer cleanup()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		compiled int
		last     string
		other    []string
	)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				logger.Info("Still building "+what, "compiled", compiled, "ofAtMost", total, "last", last)
				mu.Unlock()
			}
		}
	}()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		l := sc.Text()
		mu.Lock()
		if l != "" && !strings.ContainsAny(l, " \t:") && !strings.HasPrefix(l, "#") {
			compiled++
			last = l
		} else {
			other = append(other, l)
		}
		mu.Unlock()
	}
	err = cmd.Wait()
	close(done)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, strings.Join(other, "\n"))
	}
	return nil
}

// ProjectBuildTags are the build tags of the project's binaries, the
// Makefile's BUILDTAGS (test/images checks that they agree).
const ProjectBuildTags = "grpcnotrace"

// BinDirEnv names a directory of freshly built project binaries, which
// BuildProject uses instead of building. `make test` sets it to the bin/ its
// build step has just filled; nothing else should.
const BinDirEnv = "CSI_TOPOLOGY_TEST_BIN_DIR"

// BuildProject builds the project's commands (e.g. "./cmd/mock-driver")
// into outDir; Go's build cache makes repeated builds cheap, but each still
// links. When $CSI_TOPOLOGY_TEST_BIN_DIR (BinDirEnv) holds every command,
// they are linked (symlinked) from there instead.
func BuildProject(ctx context.Context, repoRoot, outDir string, pkgs ...string) error {
	if dir := os.Getenv(BinDirEnv); dir != "" && linkBuilt(dir, outDir, pkgs) == nil {
		return nil
	}
	args := append([]string{"build", "-tags", ProjectBuildTags, "-o", outDir + string(filepath.Separator)}, pkgs...)
	cmd, cleanup := goCommand(ctx, repoRoot, args...)
	defer cleanup()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// linkBuilt symlinks the binaries of pkgs from dir into outDir, or fails
// when dir lacks one of them.
func linkBuilt(dir, outDir string, pkgs []string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, p := range pkgs {
		name := filepath.Base(p)
		src, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if fi, err := os.Stat(src); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not a built binary", src)
		}
		dst := filepath.Join(outDir, name)
		_ = os.Remove(dst)
		if err := os.Symlink(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// CachedBuild runs build once per cache directory dir: it makes dir, takes
// its lock (concurrent callers wait for each other, and say so), and
// returns at once when a complete build is stamped there; else it logs
// start (what the build is and how long it takes), runs build, stamps dir
// complete and logs the duration. what names the build in messages.
func CachedBuild(ctx context.Context, dir, what, start string, build func() error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"), what)
	if err != nil {
		return err
	}
	defer unlock()
	stamp := filepath.Join(dir, ".complete")
	if _, err := os.Stat(stamp); err == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	began := time.Now()
	logger.Info(start, "dir", dir)
	if err := build(); err != nil {
		return fmt.Errorf("building %s: %w", what, err)
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		return err
	}
	logger.Info("Built "+what, "duration", time.Since(began).Round(time.Second))
	return nil
}

// LockFile takes an exclusive lock on path (created if missing), waiting
// for other processes that hold it (and saying so, as lockFile), and
// returns the unlock function.
func LockFile(ctx context.Context, path, what string) (func(), error) {
	return lockFile(ctx, path, what)
}

// lockFile takes the exclusive lock on path. While another process holds
// it (one that builds what) it says so, and again every progressEvery, so
// that a caller waiting for another's build is never silent.
func lockFile(ctx context.Context, path, what string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	unlock := func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return unlock, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Waiting for another process that builds "+what, "lock", path)
	locked := make(chan error, 1)
	go func() { locked <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	start := time.Now()
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case err := <-locked:
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("locking %s: %w", path, err)
			}
			return unlock, nil
		case <-t.C:
			logger.Info("Still waiting for another process that builds "+what, "lock", path, "waited", time.Since(start).Round(time.Second))
		}
	}
}

// GoCommand is goCommand for other test packages: a static go command in
// dir that stops cleanly, with its whole process group, when ctx ends. Call
// cleanup after the command has ended.
func GoCommand(ctx context.Context, dir string, args ...string) (cmd *exec.Cmd, cleanup func()) {
	return goCommand(ctx, dir, args...)
}

// goCommand returns a static (CGO_ENABLED=0) go command in dir that stops
// cleanly when ctx ends: it runs in a process group of its own, and
// cancelling kills the whole group, compilers and linker included (killing
// go alone would leave them running). Its work files go to a temp dir of
// its own, which cleanup removes, since a killed go build leaves its work
// dir behind. Call cleanup after the command has ended.
func goCommand(ctx context.Context, dir string, args ...string) (*exec.Cmd, func()) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	tmp, err := os.MkdirTemp("", "csi-topology-gobuild-")
	if err != nil {
		return cmd, func() {}
	}
	cmd.Env = append(cmd.Env, "GOTMPDIR="+tmp)
	return cmd, func() { _ = os.RemoveAll(tmp) }
}
