package kubeletnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// NodePaths are the host paths each node has its own of: kubelet's root
// directory, which a driver's node DaemonSet names in its hostPath volumes
// (plugins/<driver>/, plugins_registry/, pods/), and the mock driver's
// data directory (deploy/'s node DaemonSet). A node's kubelet and
// containerd, and so its pods, run in a mount namespace of the node's own
// where each of these is the node's directory HostPath(path), as if each
// node were a machine of its own.
var NodePaths = []string{"/var/lib/kubelet", "/var/lib/csi-mock"}

// KubeletRoot is kubelet's root directory on every node, as its pods see it.
const KubeletRoot = "/var/lib/kubelet"

// HostPath is where the node keeps path, one of NodePaths, on the host.
func (n *Node) HostPath(path string) string {
	return n.path("root", filepath.FromSlash(strings.TrimPrefix(path, "/")))
}

// startMountNamespace starts the node's mount namespace: a process that
// unshares its mounts (private propagation: nothing of the node's reaches
// the host, nothing of the host's later mounts reaches the node), mounts
// HostPath(p) on each of NodePaths (kubelet's root shared, as kubelet makes
// it for Bidirectional propagation) and waits. The node's containerd and
// kubelet enter it (inNamespace).
func (n *Node) startMountNamespace(ctx context.Context) error {
	script := []string{"set -e"}
	for _, p := range NodePaths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("mount point %s on the host: %w", p, err)
		}
		if err := os.MkdirAll(n.HostPath(p), 0o755); err != nil {
			return err
		}
		script = append(script, fmt.Sprintf("mount --bind %q %q", n.HostPath(p), p))
	}
	script = append(script, "mount --make-rshared "+KubeletRoot, "exec sleep infinity")
	p, err := n.cluster.StartProcess(n.Name+"-mountns", "unshare",
		[]string{"--mount", "--propagation", "private", "sh", "-c", strings.Join(script, "; ")}, nil)
	if err != nil {
		return err
	}
	n.mountns = p
	return n.waitFor(ctx, time.Minute, "the node's mount namespace", func() error {
		if p.Exited() {
			return fmt.Errorf("%w: its process exited (log: %s)", errGiveUp, p.LogPath())
		}
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
			return fmt.Errorf("still mounting (%v)", err)
		}
		return nil
	})
}

// inNamespace starts binary in the node's mount namespace (nsenter
// executes it there, the same process).
func (n *Node) inNamespace(name, binary string, args, env []string) (*controlplane.Process, error) {
	ns := "--mount=" + filepath.Join("/proc", strconv.Itoa(n.mountns.Pid()), "ns", "mnt")
	return n.cluster.StartProcess(name, "nsenter", append([]string{ns, "--", binary}, args...), env)
}
