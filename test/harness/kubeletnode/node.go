package kubeletnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// Options configure AddNodes.
type Options struct {
	// Count is the number of nodes; default 1.
	Count int
	// NamePrefix names the nodes <NamePrefix><i>; default "real-node-".
	NamePrefix string
	// Names, when set, name the nodes instead (Count is then its length),
	// e.g. the kind cluster's workers that deploy/'s mock overlay knows.
	Names []string
	// Labels are every node's labels (e.g. topology); kubelet registers the
	// node with them.
	Labels map[string]string
	// ReadyTimeout bounds each node's start-up until Ready; default 3
	// minutes (a loaded 2-core machine starts a kubelet in about 10 s).
	ReadyTimeout time.Duration
}

// Node is a real node: a kubelet and a containerd of its own on this host,
// registered with the lab's control plane.
type Node struct {
	// Name is the Node's name (kubelet's --hostname-override).
	Name string
	// Dir holds everything of the node: configurations, kubelet's root
	// directory, containerd's root and state, pod logs.
	Dir string
	// ContainerdSocket is the node's CRI endpoint.
	ContainerdSocket string
	// CgroupRoot is kubelet's cgroupRoot (cgroupfs driver).
	CgroupRoot string
	// KubeletPort and HealthzPort are kubelet's ports on 127.0.0.1.
	KubeletPort, HealthzPort int
	// Bridge and PodCIDR are the node's CNI bridge and pod subnet.
	Bridge, PodCIDR string
	// Labels are the labels kubelet registers the node with.
	Labels map[string]string

	cluster *controlplane.Cluster
	bins    Binaries
	host    Host
	slot    *slot
	// cgroupParents are the cgroups newNode created above CgroupRoot.
	cgroupParents []string
	mountns       *controlplane.Process
	kubelet       *controlplane.Process
	containerd    *controlplane.Process
}

// errGiveUp marks an error that waitFor must not retry.
var errGiveUp = errors.New("giving up")

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}

// Kubelet is the node's kubelet process.
func (n *Node) Kubelet() *controlplane.Process { return n.kubelet }

// Containerd is the node's containerd process.
func (n *Node) Containerd() *controlplane.Process { return n.containerd }

// newNode allocates a node's host-wide slot (bridge, subnet), directory,
// cgroupRoot and ports.
func newNode(c *controlplane.Cluster, bins Binaries, host Host, dir, name string, labels map[string]string) (*Node, error) {
	s, err := takeSlot()
	if err != nil {
		return nil, err
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		s.release()
		return nil, err
	}
	n := &Node{
		Name: name, Dir: filepath.Join(dir, name), Labels: labels,
		CgroupRoot:  filepath.Join(host.OwnCgroup, "csi-topology-"+strconv.Itoa(s.index)),
		KubeletPort: ports[0], HealthzPort: ports[1],
		Bridge:  "csitp" + strconv.Itoa(s.index),
		PodCIDR: fmt.Sprintf("10.244.%d.0/24", s.index),
		cluster: c, bins: bins, host: host, slot: s,
	}
	n.ContainerdSocket = n.path("containerd.sock")
	// A run killed in the same slot (a test timeout) left its containers,
	// shims, mounts, cgroups and bridge behind; the cgroups it created above
	// its own are this node's to remove (another stale node may still be
	// below them).
	var staleParents []string
	if old := s.stale(host); old != nil {
		_ = old.cleanUp()
		staleParents = old.cgroupParents
		// Its Nodes.Dir: the images, then the directory once empty.
		_ = os.RemoveAll(filepath.Join(filepath.Dir(old.Dir), "images"))
		_ = os.Remove(filepath.Dir(old.Dir))
	}
	n.removeBridge()
	if err := host.removeCgroup(n.CgroupRoot); err != nil {
		s.release()
		return nil, fmt.Errorf("slot %d: a cgroup of an earlier run still has processes: %w", s.index, err)
	}
	if n.cgroupParents, err = host.makeCgroup(n.CgroupRoot); err != nil {
		s.release()
		return nil, err
	}
	n.cgroupParents = append(n.cgroupParents, staleParents...)
	if err := s.record(n.Dir, n.CgroupRoot, n.cgroupParents); err != nil {
		s.release()
		return nil, err
	}
	return n, os.MkdirAll(n.Dir, 0o755)
}

// start starts containerd, imports the images, starts kubelet and waits
// until the Node is Ready.
func (n *Node) start(ctx context.Context, images Images, timeout time.Duration) error {
	logger := klog.FromContext(ctx)
	start := time.Now()
	if err := n.startMountNamespace(ctx); err != nil {
		return err
	}
	if err := n.routeAPIService(n.cluster.RESTConfig.Host); err != nil {
		return err
	}
	if err := n.startContainerd(ctx, images.Sandbox); err != nil {
		return err
	}
	for _, tar := range images.Tarballs {
		if err := n.ImportImage(ctx, tar); err != nil {
			return err
		}
	}
	if err := n.startKubelet(); err != nil {
		return err
	}
	if err := n.waitHealthy(ctx, timeout); err != nil {
		return err
	}
	if err := n.WaitReady(ctx, timeout); err != nil {
		return err
	}
	logger.Info("Real node Ready", "node", n.Name, "dir", n.Dir, "startup", time.Since(start).Round(time.Millisecond))
	return nil
}

// WaitReady waits until the Node object's Ready condition is True.
func (n *Node) WaitReady(ctx context.Context, timeout time.Duration) error {
	return n.waitFor(ctx, timeout, "node "+n.Name+" to be Ready", func() error {
		if n.kubelet.Exited() {
			return fmt.Errorf("%w: kubelet exited (log: %s)", errGiveUp, n.kubelet.LogPath())
		}
		node, err := n.cluster.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				if c.Status == v1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("Ready=%s: %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// waitFor polls cond every 500 ms until it returns nil, an error wrapping
// errGiveUp, or timeout passes; the error then names what was awaited and
// cond's last error.
func (n *Node) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		if errors.Is(last, errGiveUp) {
			return false, last
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (last: %v)", what, err, last)
	}
	return nil
}

func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
