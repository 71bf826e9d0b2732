package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// NodeLocalConfig describes a NodeLocalLab.
type NodeLocalConfig struct {
	// Nodes is how many nodes the lab has, named node-1, node-2, ...
	Nodes int
	// CapacityBytes is each node's capacity in its driver (-1: unlimited).
	CapacityBytes int64
	// TTL is the heartbeat Lease duration of the nodes' csi-node-publishers,
	// which renew it every second; default 4s.
	TTL time.Duration
	// ProvisionerArgs are extra flags of every node's csi-provisioner, after
	// NodeLocalProvisionerArgs.
	ProvisionerArgs []string
	// BinDir: see Config.BinDir.
	BinDir string
	// LabelSelection runs every node's provisioner with
	// --node-deployment-selection=label and csi-node-router beside them.
	LabelSelection bool
}

// NodeLocalProvisionerArgs are the flags every node's csi-provisioner of a
// NodeLocalLab runs with, besides the lab's retry flags: node deployment
// with short race delays (the tests wait for Immediate claims), capacity
// tracking polled every 3 s.
var NodeLocalProvisionerArgs = []string{
	"--node-deployment", "--node-deployment-base-delay=200ms", "--node-deployment-max-delay=2s",
	"--enable-capacity", "--capacity-poll-interval=3s",
}

// NodeLocalLab deploys a node-local driver the way a vendor of local
// storage (LVM, local disks) would: on every node, in one pod of a
// DaemonSet, the mock driver serving both its controller and its node
// service with the node as its only segment (kubernetes.io/hostname), its
// own state and capacity; csi-node-publisher, which publishes the node's
// CSINode entry and renews the driver's heartbeat Lease; and
// `csi-provisioner --node-deployment` with NODE_NAME set to the node, which
// provisions only the claims selected for its node, under the
// ServiceAccount csi-node-provisioner with the rules of deploy/'s
// node-deployment component. There is no central
// controller nor provisioner. Each node's driver has its own admin
// endpoint, so a test reads what that node was asked and sets its faults.
type NodeLocalLab struct {
	*Lab
	// Names are the nodes, in order.
	Names []string
	nodes map[string]*LocalNode
	ncfg  NodeLocalConfig
	// router is csi-node-router (with LabelSelection); routerKubeconfig
	// its ServiceAccount's.
	router           *controlplane.Process
	routerKubeconfig string
	routerStarts     int
}

// LocalNode is one node of a NodeLocalLab: its driver (HeartbeatNode's
// StartDriver and KillDriver, the Lease helpers) and its provisioner.
type LocalNode struct {
	*HeartbeatNode
	// AdminURL is the driver's admin endpoint (the same across restarts).
	AdminURL string
	// HTTPURL is the base URL of the provisioner's --http-endpoint
	// (/metrics, /readyz).
	HTTPURL string
	// StateFile keeps the driver's volumes across restarts.
	StateFile   string
	nl          *NodeLocalLab
	provisioner *controlplane.Process
	provStarts  int
}

// SetupNodeLocal builds the project's binaries (unless cfg.BinDir has
// them), creates the CSIDriver object (storageCapacity: true), the nodes,
// and on every node starts the node-local driver, csi-node-publisher (it
// returns once the node's CSINode has the driver) and csi-provisioner in
// node deployment (it returns once each answers /readyz).
func SetupNodeLocal(ctx context.Context, c *controlplane.Cluster, cfg NodeLocalConfig) (*NodeLocalLab, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 4 * time.Second
	}
	l, err := newLab(ctx, c, Config{BinDir: cfg.BinDir})
	if err != nil {
		return nil, err
	}
	nl := &NodeLocalLab{Lab: l, nodes: map[string]*LocalNode{}, ncfg: cfg}
	// The per-node instances run under the ServiceAccount and the rules
	// of deploy/'s node-deployment component (the lab never runs the
	// central provisioner).
	if err := c.ApplyFile(ctx, filepath.Join(c.RepoRoot, "deploy", "kubernetes", "components", "node-deployment", "provisioner-rbac.yaml"), false); err != nil {
		return nil, err
	}
	if l.provKubeconfig, err = c.ServiceAccountKubeconfig(ctx, PublisherNamespace, "csi-node-provisioner"); err != nil {
		return nil, err
	}
	if err := l.createCSIDriver(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Nodes; i++ {
		if _, err := nl.addNode(ctx, fmt.Sprintf("node-%d", i)); err != nil {
			return nil, err
		}
	}
	if cfg.LabelSelection {
		if err := nl.StartRouter(ctx); err != nil {
			return nil, err
		}
	}
	// Started together, waited for together: each waits for its caches.
	for _, name := range nl.Names {
		if err := nl.nodes[name].launchProvisioner(); err != nil {
			return nil, err
		}
	}
	for _, name := range nl.Names {
		if err := nl.nodes[name].waitProvisionerReady(ctx); err != nil {
			return nil, err
		}
	}
	return nl, nil
}

// addNode creates a Ready node, starts its driver and its publisher.
func (nl *NodeLocalLab) addNode(ctx context.Context, name string) (*LocalNode, error) {
	if _, err := nl.Cluster.CreateNode(ctx, name, nil, nil); err != nil {
		return nil, err
	}
	nl.Nodes[name] = ""
	adminAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	n := &LocalNode{nl: nl, AdminURL: "http://" + adminAddr, HTTPURL: "http://" + httpAddr,
		StateFile: filepath.Join(nl.Cluster.Dir, "mock-state-"+name+".json")}
	n.HeartbeatNode = &HeartbeatNode{l: nl.Lab, Name: name, TTL: nl.ncfg.TTL,
		driverArgs: []string{
			"--mode=both", "--node-id=" + name, "--node-topology=" + v1.LabelHostname + "=" + name,
			"--capacity-bytes=" + strconv.FormatInt(nl.ncfg.CapacityBytes, 10), "--state-file=" + n.StateFile,
			"--endpoint=unix://" + nl.nodeSocket(name), "--admin-address=" + adminAddr, "-v=2",
		},
		ready: func() error { return waitHTTP(n.AdminURL+"/healthz", 30*time.Second) },
	}
	if err := n.startDriver(); err != nil {
		return nil, err
	}
	if err := nl.StartPublisher(ctx, name, "--lease-duration="+nl.ncfg.TTL.String(), "--lease-renew-interval=1s"); err != nil {
		return nil, err
	}
	nl.Names = append(nl.Names, name)
	nl.nodes[name] = n
	return n, nil
}

// AddNode adds one more node to the lab, with its driver, publisher and
// provisioner, and returns once the provisioner answers /readyz.
func (nl *NodeLocalLab) AddNode(ctx context.Context, name string) (*LocalNode, error) {
	n, err := nl.addNode(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := n.launchProvisioner(); err != nil {
		return nil, err
	}
	return n, n.waitProvisionerReady(ctx)
}

// RemoveNode takes a node out of the lab as when a machine is removed for
// good: its provisioner, publisher and driver stop, and its Node object is
// deleted (what the cluster holds of it then goes through the garbage
// collector: its Lease, its capacity objects).
func (nl *NodeLocalLab) RemoveNode(ctx context.Context, name string) error {
	n := nl.nodes[name]
	if n == nil {
		return fmt.Errorf("no node %q in the lab", name)
	}
	n.StopProvisioner()
	nl.StopPublisher(name)
	n.KillDriver()
	if err := nl.Cluster.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	delete(nl.nodes, name)
	delete(nl.Nodes, name)
	nl.Names = slices.DeleteFunc(nl.Names, func(s string) bool { return s == name })
	return nil
}

// Node returns the named node, nil if the lab has none of that name.
func (nl *NodeLocalLab) Node(name string) *LocalNode { return nl.nodes[name] }

// EnsureDriver starts the node's driver unless it runs (a test's cleanup
// after a kill).
func (n *LocalNode) EnsureDriver() error {
	if n.driver != nil && !n.driver.Exited() {
		return nil
	}
	return n.startDriver()
}

// StartProvisioner (re)starts the node's csi-provisioner with
// NodeLocalProvisionerArgs, NodeLocalConfig.ProvisionerArgs and extra,
// stopping a running one first, and waits until it answers /readyz.
func (n *LocalNode) StartProvisioner(ctx context.Context, extra ...string) error {
	n.StopProvisioner()
	if err := n.launchProvisioner(extra...); err != nil {
		return err
	}
	return n.waitProvisionerReady(ctx)
}

// StartProvisionerBinary stops the node's provisioner and starts binary in
// its place, e.g. upstream external-provisioner, as the process name (its
// log is <name>-<node>-<start>.log), with the lab's flags every
// provisioner takes (its driver's socket, its kubeconfig, retry intervals,
// -v=3), NODE_NAME and NAMESPACE set as for ours, and args; none of
// NodeLocalProvisionerArgs. It does not wait for readiness (upstream has no
// /readyz). StopProvisioner stops it; StartProvisioner and
// NodeLocalLab.SetSelection put ours back.
func (n *LocalNode) StartProvisionerBinary(name, binary string, args ...string) error {
	return n.StartProvisionerBinaryEnv(name, binary, nil, args...)
}

// StartProvisionerBinaryEnv is StartProvisionerBinary with env
// ("NAME=value") added to the process's environment after NODE_NAME and
// NAMESPACE, e.g. POD_NAME naming a pod for upstream's
// --capacity-ownerref-level.
func (n *LocalNode) StartProvisionerBinaryEnv(name, binary string, env []string, args ...string) error {
	n.StopProvisioner()
	n.provStarts++
	p, err := n.nl.startProvisionerFor(fmt.Sprintf("%s-%s-%d", name, n.Name, n.provStarts), binary,
		n.nl.nodeSocket(n.Name), append([]string{"NODE_NAME=" + n.Name, "NAMESPACE=" + CapacityNamespace}, env...), args...)
	if err != nil {
		return err
	}
	n.provisioner = p
	return nil
}

func (n *LocalNode) launchProvisioner(extra ...string) error {
	n.provStarts++
	args := append(append(append([]string(nil), NodeLocalProvisionerArgs...), "--http-endpoint="+strings.TrimPrefix(n.HTTPURL, "http://")),
		append(append([]string(nil), n.nl.ncfg.ProvisionerArgs...), extra...)...)
	if n.nl.ncfg.LabelSelection {
		// Before the test's extra flags, which may override it.
		args = append(append(append([]string(nil), NodeLocalProvisionerArgs...), LabelSelectionArg,
			"--http-endpoint="+strings.TrimPrefix(n.HTTPURL, "http://")), append(append([]string(nil), n.nl.ncfg.ProvisionerArgs...), extra...)...)
	}
	p, err := n.nl.startProvisionerFor(fmt.Sprintf("csi-provisioner-%s-%d", n.Name, n.provStarts), filepath.Join(n.nl.BinDir, "csi-provisioner"),
		n.nl.nodeSocket(n.Name), []string{"NODE_NAME=" + n.Name, "NAMESPACE=" + CapacityNamespace}, args...)
	if err != nil {
		return err
	}
	n.provisioner = p
	return nil
}

// waitProvisionerReady waits until the node's provisioner answers /readyz,
// or fails at once with the end of its log when it exits.
func (n *LocalNode) waitProvisionerReady(ctx context.Context) error {
	p := n.provisioner
	var last string
	err := n.nl.Cluster.WaitFor(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("csi-provisioner of %s exited: %v; the end of %s:\n%s", n.Name, p.Wait(), p.LogPath(), p.LogTail(10))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.HTTPURL+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("csi-provisioner of %s not ready (last answer %q): %w", n.Name, last, err)
	}
	return nil
}

// StopProvisioner stops the node's provisioner (SIGTERM).
func (n *LocalNode) StopProvisioner() {
	if n.provisioner != nil {
		n.provisioner.Stop(15 * time.Second)
	}
}

// KillProvisioner kills the node's provisioner with SIGKILL and returns
// once it is gone.
func (n *LocalNode) KillProvisioner() {
	if n.provisioner != nil {
		n.provisioner.Kill()
	}
}

// Provisioner returns the node's provisioner process (the last started).
func (n *LocalNode) Provisioner() *controlplane.Process { return n.provisioner }

// CreateRequests lists the CreateVolume requests the node's driver received
// since it (last) started.
func (nl *NodeLocalLab) CreateRequests(ctx context.Context, node string) ([]driver.CreateRecord, error) {
	var out []driver.CreateRecord
	return out, nl.nodeAdmin(ctx, node, http.MethodGet, "/requests?method=CreateVolume", nil, &out)
}

// Calls lists the calls of method ("" for all) the node's driver answered
// since it (last) started, oldest first.
func (nl *NodeLocalLab) Calls(ctx context.Context, node, method string) ([]driver.CallRecord, error) {
	var out []driver.CallRecord
	return out, nl.nodeAdmin(ctx, node, http.MethodGet, "/requests?method="+url.QueryEscape(method), nil, &out)
}

// AllCreateRequests returns every node's CreateRequests, by node.
func (nl *NodeLocalLab) AllCreateRequests(ctx context.Context) (map[string][]driver.CreateRecord, error) {
	out := map[string][]driver.CreateRecord{}
	for _, name := range nl.Names {
		recs, err := nl.CreateRequests(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = recs
	}
	return out, nil
}

// Volumes lists the node's driver's volumes (from its state file, so also
// those made before a restart).
func (nl *NodeLocalLab) Volumes(ctx context.Context, node string) ([]state.Volume, error) {
	var out []state.Volume
	return out, nl.nodeAdmin(ctx, node, http.MethodGet, "/volumes", nil, &out)
}

// Segment returns the node's segment (its only one) with its capacity and
// usage.
func (nl *NodeLocalLab) Segment(ctx context.Context, node string) (driver.SegmentStatus, error) {
	var out []driver.SegmentStatus
	if err := nl.nodeAdmin(ctx, node, http.MethodGet, "/segments", nil, &out); err != nil {
		return driver.SegmentStatus{}, err
	}
	if len(out) != 1 {
		return driver.SegmentStatus{}, fmt.Errorf("the driver of %s has %d segments, want 1: %+v", node, len(out), out)
	}
	return out[0], nil
}

// SetCapacity sets the node's capacity in its driver.
func (nl *NodeLocalLab) SetCapacity(ctx context.Context, node string, bytes int64) error {
	return nl.nodeAdmin(ctx, node, http.MethodPut, "/segments",
		map[string]any{"topology": map[string]string{v1.LabelHostname: node}, "capacityBytes": bytes}, nil)
}

// SetFaults replaces the fault rules of the node's driver (nil clears them).
func (nl *NodeLocalLab) SetFaults(ctx context.Context, node string, rules []faults.Rule) error {
	if rules == nil {
		rules = []faults.Rule{}
	}
	return nl.nodeAdmin(ctx, node, http.MethodPut, "/faults", rules, nil)
}

func (nl *NodeLocalLab) nodeAdmin(ctx context.Context, node, method, path string, in, out any) error {
	n := nl.nodes[node]
	if n == nil {
		return fmt.Errorf("the lab has no node %q", node)
	}
	return AdminCall(ctx, n.AdminURL, method, path, in, out)
}

// PublishedCapacity returns the CSIStorageCapacity objects of class in
// CapacityNamespace by the node their topology names
// (kubernetes.io/hostname); objects of another topology are under "".
func (nl *NodeLocalLab) PublishedCapacity(ctx context.Context, class string) (map[string][]storagev1.CSIStorageCapacity, error) {
	list, err := nl.Cluster.Client.StorageV1().CSIStorageCapacities(CapacityNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]storagev1.CSIStorageCapacity{}
	for _, c := range list.Items {
		if c.StorageClassName != class {
			continue
		}
		node := ""
		if c.NodeTopology != nil && len(c.NodeTopology.MatchLabels) == 1 && len(c.NodeTopology.MatchExpressions) == 0 {
			node = c.NodeTopology.MatchLabels[v1.LabelHostname]
		}
		out[node] = append(out[node], c)
	}
	return out, nil
}
