package kubeletnode

import (
	"context"
	"fmt"
	"time"
)

// RestartKubelet stops the node's kubelet (SIGTERM, then SIGKILL after
// grace) and starts it again with the same configuration, as a node's
// service manager restarts it, and waits until it answers on its healthz
// port. Containers, mounts and the node's containerd stay as they are.
func (n *Node) RestartKubelet(ctx context.Context, grace, timeout time.Duration) error {
	if n.kubelet == nil {
		return fmt.Errorf("node %s: no kubelet to restart", n.Name)
	}
	n.kubelet.Stop(grace)
	if err := n.startKubelet(); err != nil {
		return fmt.Errorf("restarting node %s's kubelet: %w", n.Name, err)
	}
	return n.waitHealthy(ctx, timeout)
}
