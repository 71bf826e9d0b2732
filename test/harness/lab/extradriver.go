package lab

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// ExtraDriverSpec describes a second CSI driver StartExtraDriver deploys
// beside the lab's: the mock driver under another name on one node of its
// own.
type ExtraDriverSpec struct {
	// Name is the driver's name (mock-driver --name), e.g. a CSI
	// migration target such as ebs.csi.aws.com.
	Name string
	// Node is the node created for the driver, with NodeLabels.
	Node       string
	NodeLabels map[string]string
	// Topology is the driver's segment on the node, e.g.
	// "topology.ebs.csi.aws.com/zone=us-east-1a".
	Topology string
	// CapacityBytes is the segment's capacity.
	CapacityBytes int64
	// ProvisionerArgs are extra flags of the driver's csi-provisioner.
	ProvisionerArgs []string
}

// ExtraDriver is a driver StartExtraDriver runs: the mock driver serving
// its controller and node service on one socket, csi-node-publisher for its
// node, and its own csi-provisioner (the lab's flags and ServiceAccount).
type ExtraDriver struct {
	Spec ExtraDriverSpec
	// Socket is the driver's CSI socket; AdminURL its admin endpoint.
	Socket, AdminURL string
	// Provisioner is the driver's csi-provisioner.
	Provisioner *controlplane.Process
	processes   []*controlplane.Process
}

// StartExtraDriver creates the driver's node, starts the driver and its
// csi-node-publisher (it returns once the node's CSINode has the driver)
// and its csi-provisioner. Stop stops them; the caller deletes the node.
func (l *Lab) StartExtraDriver(ctx context.Context, spec ExtraDriverSpec) (*ExtraDriver, error) {
	if _, err := l.Cluster.CreateNode(ctx, spec.Node, spec.NodeLabels, nil); err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	d := &ExtraDriver{Spec: spec, Socket: filepath.Join(l.socketDir, spec.Node+"-"+spec.Name+".sock"), AdminURL: "http://" + addr}
	drv, err := l.Cluster.StartProcess("mock-driver-"+spec.Name, filepath.Join(l.BinDir, "mock-driver"), []string{
		"--name=" + spec.Name, "--mode=both", "--node-id=" + spec.Node, "--node-topology=" + spec.Topology,
		"--capacity-bytes=" + strconv.FormatInt(spec.CapacityBytes, 10), "--endpoint=unix://" + d.Socket,
		"--admin-address=" + addr, "-v=5",
	}, nil)
	if err != nil {
		return nil, err
	}
	d.processes = append(d.processes, drv)
	if err := waitHTTP(d.AdminURL+"/healthz", 30*time.Second); err != nil {
		d.Stop()
		return nil, err
	}
	pub, err := l.Cluster.StartProcess("csi-node-publisher-"+spec.Name, filepath.Join(l.BinDir, "csi-node-publisher"), []string{
		"--csi-address=unix://" + d.Socket, "--kubeconfig=" + l.pubKubeconfig, "--node-name=" + spec.Node,
		"--resync-period=10s", "--lease-namespace=" + PublisherNamespace, "-v=2",
	}, nil)
	if err != nil {
		d.Stop()
		return nil, err
	}
	d.processes = append(d.processes, pub)
	if err := l.Cluster.WaitFor(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		if pub.Exited() {
			return false, fmt.Errorf("csi-node-publisher for %s exited: %v (log %s)", spec.Name, pub.Wait(), pub.LogPath())
		}
		cn, err := l.Cluster.Client.StorageV1().CSINodes().Get(ctx, spec.Node, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(cn.Spec.Drivers, func(e storagev1.CSINodeDriver) bool { return e.Name == spec.Name }), nil
	}); err != nil {
		d.Stop()
		return nil, err
	}
	if d.Provisioner, err = l.startProvisionerFor("csi-provisioner-"+spec.Name, filepath.Join(l.BinDir, "csi-provisioner"), d.Socket, nil,
		append(append([]string(nil), l.cfg.ProvisionerArgs...), spec.ProvisionerArgs...)...); err != nil {
		d.Stop()
		return nil, err
	}
	d.processes = append(d.processes, d.Provisioner)
	return d, nil
}

// Stop stops the driver's processes (SIGTERM), the provisioner first.
func (d *ExtraDriver) Stop() {
	for i := len(d.processes) - 1; i >= 0; i-- {
		d.processes[i].Stop(15 * time.Second)
	}
	d.processes = nil
}

// Volumes lists the driver's volumes.
func (d *ExtraDriver) Volumes(ctx context.Context) ([]state.Volume, error) {
	var out []state.Volume
	return out, AdminCall(ctx, d.AdminURL, http.MethodGet, "/volumes", nil, &out)
}
