package kubeletnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// Binaries are the paths of what a real node runs, besides runc (from the
// host's packages).
type Binaries struct {
	Kubelet, Containerd, Shim, Ctr string
	// CNIDir holds the CNI plugins (bridge, host-local).
	CNIDir string
}

// runtimeModule is the nested module of containerd and the CNI plugins.
const runtimeModule = "test/harness/kubeletnode/mod"

// runtimeTags leave out containerd's snapshotters that need cgo or tools
// the host may lack; the nodes use overlayfs.
const runtimeTags = "no_btrfs,no_devmapper,no_zfs"

var (
	kubeletTargets = []string{"k8s.io/kubernetes/cmd/kubelet"}
	runtimeTargets = []string{
		"github.com/containerd/containerd/v2/cmd/containerd",
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		"github.com/containerd/containerd/v2/cmd/ctr",
	}
	cniTargets = []string{
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
	}
)

// BinariesDir returns where the node binaries of this checkout are cached:
// <user cache dir>/csi-topology-provisioner/nodes/<key>, where key hashes
// both nested modules (kubelet's, test/harness/controlplane/k8s, and the runtime's,
// test/harness/kubeletnode/mod) and the Go version.
func BinariesDir(repoRoot string) (string, error) {
	return controlplane.CacheDir(repoRoot, "nodes", runtime.Version()+runtimeTags,
		"test/harness/controlplane/k8s/go.mod", "test/harness/controlplane/k8s/go.sum", runtimeModule+"/go.mod", runtimeModule+"/go.sum")
}

// BuildBinaries builds kubelet (from the control plane's nested module,
// the pinned k8s.io/kubernetes), containerd, its runc shim, ctr and the CNI
// plugins (from test/harness/kubeletnode/mod), unless a complete build is cached in
// BinariesDir. The build logs progress every 30 s; concurrent callers wait
// for each other on a file lock.
func BuildBinaries(ctx context.Context, repoRoot string) (Binaries, error) {
	logger := klog.FromContext(ctx)
	dir, err := BinariesDir(repoRoot)
	if err != nil {
		return Binaries{}, err
	}
	bins := Binaries{
		Kubelet:    filepath.Join(dir, "kubelet"),
		Containerd: filepath.Join(dir, "containerd"),
		Shim:       filepath.Join(dir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(dir, "ctr"),
		CNIDir:     filepath.Join(dir, "cni"),
	}
	err = controlplane.CachedBuild(ctx, dir, "the node binaries", "Building kubelet, containerd and the CNI plugins (cached afterwards)",
		func() error {
			if err := os.MkdirAll(bins.CNIDir, 0o755); err != nil {
				return err
			}
			start := time.Now()
			steps := []struct {
				what, mod, out, tags string
				targets              []string
			}{
				{"kubelet", "test/harness/controlplane/k8s", dir, "", kubeletTargets},
				{"containerd", runtimeModule, dir, runtimeTags, runtimeTargets},
				{"the CNI plugins", runtimeModule, bins.CNIDir, "", cniTargets},
			}
			for _, s := range steps {
				if err := controlplane.GoBuildWithProgress(ctx, s.what, filepath.Join(repoRoot, s.mod), s.out, s.tags, s.targets); err != nil {
					return fmt.Errorf("%s: %w", s.what, err)
				}
				logger.Info("Built "+s.what, "sinceStart", time.Since(start).Round(time.Second))
			}
			return nil
		})
	if err != nil {
		return Binaries{}, err
	}
	return bins, nil
}
