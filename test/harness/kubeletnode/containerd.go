package kubeletnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// containerdConfig is a node's containerd configuration (version 3): every
// path of its own (root, state, sockets, runc's root, network namespaces,
// CNI configuration) so that several containerds share one host, the CRI
// sandbox image pinned to the lab's pause image, NRI off (its socket path
// is global), and no OOM score below containerd's own: a host without
// CAP_SYS_RESOURCE cannot lower one, and runc fails to start a pod's
// sandbox (whose score kubelet asks to be -998).
func (n *Node) containerdConfig(sandboxImage string) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return strings.Join([]string{
		"version = 3",
		"root = " + q(n.path("containerd", "root")),
		"state = " + q(n.path("containerd", "state")),
		`disabled_plugins = ["io.containerd.nri.v1.nri"]`,
		"[grpc]",
		"  address = " + q(n.ContainerdSocket),
		"[plugins.'io.containerd.cri.v1.images']",
		"  snapshotter = 'overlayfs'",
		"[plugins.'io.containerd.cri.v1.images'.pinned_images]",
		"  sandbox = " + q(sandboxImage),
		"[plugins.'io.containerd.cri.v1.runtime']",
		"  netns_mounts_under_state_dir = true",
		"  restrict_oom_score_adj = true",
		"[plugins.'io.containerd.cri.v1.runtime'.cni]",
		"  bin_dirs = [" + q(n.bins.CNIDir) + "]",
		"  conf_dir = " + q(n.path("cni", "net.d")),
		"  use_internal_loopback = true",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd]",
		"  default_runtime_name = 'runc'",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
		"  runtime_type = 'io.containerd.runc.v2'",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
		"  BinaryName = " + q(n.host.Runc),
		"  Root = " + q(n.path("runc")),
		"  SystemdCgroup = false",
		"[plugins.'io.containerd.grpc.v1.cri']",
		"  stream_server_address = '127.0.0.1'",
		"  stream_server_port = '0'",
		"",
	}, "\n")
}

// cniConfig is the node's CNI network: a bridge of its own with the node's
// pod subnet (host-local addresses, kept in the node's dir), no masquerade
// and no default route: the pods' traffic stays on this host. Their one
// route out of the subnet is to the kubernetes Service (APIServiceIP), via
// the bridge, where routeAPIService sends it to the API server.
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": %q}], "dataDir": %q}
  }]
}
`, "csitp-"+n.Name, n.Bridge, n.PodCIDR, APIServiceIP+"/32", n.path("cni", "ipam"))
}

// startContainerd writes the node's containerd and CNI configuration and
// starts containerd, then waits until it answers on its socket.
func (n *Node) startContainerd(ctx context.Context, sandboxImage string) error {
	for _, d := range []string{n.path("cni", "net.d"), n.path("containerd"), n.path("runc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cfg := n.path("containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(n.containerdConfig(sandboxImage)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("cni", "net.d", "10-bridge.conflist"), []byte(n.cniConfig()), 0o644); err != nil {
		return err
	}
	// The shim is found on PATH, next to containerd.
	env := []string{"PATH=" + filepath.Dir(n.bins.Shim) + ":" + os.Getenv("PATH")}
	p, err := n.inNamespace(n.Name+"-containerd", n.bins.Containerd, []string{"--config", cfg}, env)
	if err != nil {
		return err
	}
	n.containerd = p
	return n.waitFor(ctx, time.Minute, "containerd to answer on "+n.ContainerdSocket, func() error {
		if p.Exited() {
			return fmt.Errorf("%w: containerd exited (log: %s)", errGiveUp, p.LogPath())
		}
		_, err := n.Ctr(ctx, "version")
		return err
	})
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace (the
// CRI's).
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.bins.Ctr, append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ImportImage imports a `docker load` archive (or an OCI archive) into
// the node's containerd, in the CRI's namespace, unpacked for overlayfs:
// pods use it with imagePullPolicy Never or IfNotPresent, no registry
// involved.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	_, err := n.Ctr(ctx, "images", "import", "--snapshotter", "overlayfs", tarball)
	return err
}
