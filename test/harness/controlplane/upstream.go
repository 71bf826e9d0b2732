package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// The upstream sidecar that ours replaces, as a vendor runs it: the
// differential tests build it from the Go module proxy and run it beside
// ours on the same control plane.
const (
	UpstreamProvisionerModule  = "github.com/kubernetes-csi/external-provisioner/v6"
	UpstreamProvisionerVersion = "v6.3.0"
)

// Upstream is a built upstream external-provisioner.
type Upstream struct {
	// Provisioner is its csi-provisioner binary.
	Provisioner string
	// SourceDir is its module's source tree, e.g. for deploy/kubernetes/.
	SourceDir string
}

// RBAC is the path of upstream's own deploy/kubernetes/rbac.yaml, as its
// release ships it.
func (u Upstream) RBAC() string {
	return filepath.Join(u.SourceDir, "deploy", "kubernetes", "rbac.yaml")
}

// UpstreamDir returns where the upstream build is cached:
// <user cache dir>/csi-topology-provisioner/upstream/<key>, keyed by the
// module version and the Go version (<repo>/.cache/upstream/<key> without a
// user cache dir).
func UpstreamDir(repoRoot string) string {
	h := sha256.Sum256([]byte(UpstreamProvisionerModule + "@" + UpstreamProvisionerVersion + " " + runtime.Version()))
	key := UpstreamProvisionerVersion + "-" + hex.EncodeToString(h[:])[:12]
	base, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(repoRoot, ".cache", "upstream", key)
	}
	return filepath.Join(base, "csi-topology-provisioner", "upstream", key)
}

// BuildUpstream downloads upstream external-provisioner's module
// (UpstreamProvisionerVersion) from the Go module proxy and builds its
// csi-provisioner, unless a complete build is cached in UpstreamDir.
// Concurrent callers wait for each other on a file lock. The module's own
// go.mod and go.sum pin its dependencies, so the binary is upstream's
// release, not a rebuild against our versions.
func BuildUpstream(ctx context.Context, repoRoot string) (Upstream, error) {
	dir := UpstreamDir(repoRoot)
	up := Upstream{Provisioner: filepath.Join(dir, "csi-provisioner"), SourceDir: filepath.Join(dir, "src")}
	err := CachedBuild(ctx, dir, "upstream external-provisioner",
		fmt.Sprintf("Building upstream external-provisioner %s %s (cached afterwards; about 3 minutes on 2 cores)",
			UpstreamProvisionerModule, UpstreamProvisionerVersion),
		func() error {
			modDir, err := downloadModule(ctx, UpstreamProvisionerModule+"@"+UpstreamProvisionerVersion)
			if err != nil {
				return err
			}
			_ = os.RemoveAll(up.SourceDir)
			if err := copyWritable(modDir, up.SourceDir); err != nil {
				return fmt.Errorf("copying %s: %w", modDir, err)
			}
			return goBuildWithProgress(ctx, "upstream external-provisioner", up.SourceDir, dir, []string{"./cmd/csi-provisioner"})
		})
	if err != nil {
		return Upstream{}, err
	}
	return up, nil
}

// downloadModule fetches module@version into the module cache and returns
// its (read-only) directory there.
func downloadModule(ctx context.Context, modVersion string) (string, error) {
	tmp, err := os.MkdirTemp("", "csi-topology-moddownload-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// Outside any module, so that the project's go.mod plays no part.
	cmd, cleanup := goCommand(ctx, tmp, "mod", "download", "-json", modVersion)
	defer cleanup()
	cmd.Env = append(cmd.Env, "GO111MODULE=on", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w\n%s", modVersion, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", modVersion, info.Error)
	}
	return info.Dir, nil
}

// copyWritable copies the tree src to dst with writable files, since the
// module cache's copy is read-only and a build may write next to it.
func copyWritable(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
