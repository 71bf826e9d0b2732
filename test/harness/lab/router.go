package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// LabelSelectionArg is the flag of csi-provisioner that makes a node's
// instance select its claims and PVs by label (NodeLocalConfig.LabelSelection).
const LabelSelectionArg = "--node-deployment-selection=label"

// setupRouter applies deploy/'s RBAC of csi-node-router and makes the
// kubeconfig of its ServiceAccount.
func (nl *NodeLocalLab) setupRouter(ctx context.Context) error {
	c := nl.Cluster
	if err := c.ApplyFile(ctx, filepath.Join(c.RepoRoot, "deploy", "kubernetes", "components", "node-deployment", "router-rbac.yaml"), false); err != nil {
		return err
	}
	var err error
	nl.routerKubeconfig, err = c.ServiceAccountKubeconfig(ctx, PublisherNamespace, "csi-node-router")
	return err
}

// StartRouter starts csi-node-router (a running one is stopped first),
// with leader election on a short Lease, under deploy/'s RBAC, and returns
// once it answers /readyz. A router started after a kill waits for the
// dead one's Lease (4 s) before it labels.
func (nl *NodeLocalLab) StartRouter(ctx context.Context) error {
	nl.StopRouter()
	if nl.routerKubeconfig == "" {
		if err := nl.setupRouter(ctx); err != nil {
			return err
		}
	}
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	nl.routerStarts++
	p, err := nl.Cluster.StartProcess(fmt.Sprintf("csi-node-router-%d", nl.routerStarts), filepath.Join(nl.BinDir, "csi-node-router"), []string{
		"--driver-name=" + DriverName, "--kubeconfig=" + nl.routerKubeconfig, "--http-endpoint=" + addr,
		"--leader-election", "--leader-election-namespace=" + PublisherNamespace, "--leader-election-lease-duration=4s",
		"--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms", "-v=3",
	}, nil)
	if err != nil {
		return err
	}
	nl.router = p
	if err := waitHTTP("http://"+addr+"/readyz", 60*time.Second); err != nil {
		return fmt.Errorf("csi-node-router not ready: %w; the end of %s:\n%s", err, p.LogPath(), p.LogTail(10))
	}
	return nil
}

// StopRouter stops csi-node-router (SIGTERM: it releases its Lease).
func (nl *NodeLocalLab) StopRouter() {
	if nl.router != nil {
		nl.router.Stop(15 * time.Second)
		nl.router = nil
	}
}

// KillRouter kills csi-node-router with SIGKILL (its Lease stays until it
// expires) and returns once it is gone.
func (nl *NodeLocalLab) KillRouter() {
	if nl.router != nil {
		nl.router.Kill()
		nl.router = nil
	}
}

// Router returns the running csi-node-router process, nil if none runs.
func (nl *NodeLocalLab) Router() *controlplane.Process { return nl.router }

// SetSelection restarts every node's provisioner with selection by label
// (label) or of every claim and PV (!label) and starts or stops
// csi-node-router to match; it returns once all answer /readyz.
func (nl *NodeLocalLab) SetSelection(ctx context.Context, label bool) error {
	arg := "--node-deployment-selection=all"
	if label {
		arg = LabelSelectionArg
		if err := nl.StartRouter(ctx); err != nil {
			return err
		}
	} else {
		nl.StopRouter()
	}
	nl.ncfg.LabelSelection = label
	for _, name := range nl.Names {
		nl.nodes[name].StopProvisioner()
	}
	for _, name := range nl.Names {
		if err := nl.nodes[name].launchProvisioner(arg); err != nil {
			return err
		}
	}
	for _, name := range nl.Names {
		if err := nl.nodes[name].waitProvisionerReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// LabelSelection reports whether the lab's provisioners select by label.
func (nl *NodeLocalLab) LabelSelection() bool { return nl.ncfg.LabelSelection }
