// Package lab deploys the project on a local control plane the way a storage
// vendor would on a cluster: the mock driver's node service on every node
// (its NodeGetInfo answer published as the node's CSINode entry), the mock
// driver's controller, and csi-provisioner under its own ServiceAccount with
// the RBAC rules of deploy/. The end-to-end tests and `make run` share it.
package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// ZoneKey and RackKey are the mock driver's topology keys in the lab.
const (
	ZoneKey = driver.TopologyPrefix + "zone"
	RackKey = driver.TopologyPrefix + "rack"
)

// DriverName is the mock driver's name.
const DriverName = driver.DefaultName

// PublisherNamespace is the namespace of deploy/'s ServiceAccounts, where
// the lab's csi-node-publishers keep their heartbeat Leases (a pod's
// $NAMESPACE in deploy/).
const PublisherNamespace = "csi-topology"

// Config describes the lab.
type Config struct {
	// Zones and NodesPerZone shape the cluster; nodes are named
	// node-<zone>-<letter>.
	Zones        []string
	NodesPerZone int
	// Racks, when set, adds a rack topology key: the i-th node of a zone is
	// in rack Racks[i % len(Racks)], and every zone x rack is a segment.
	Racks []string
	// CapacityBytes is each zone's capacity in the mock driver;
	// ZoneCapacity overrides it per zone (split evenly over its racks).
	CapacityBytes int64
	ZoneCapacity  map[string]int64
	// ProvisionerArgs are extra csi-provisioner flags.
	ProvisionerArgs []string
	// ControllerArgs are extra flags of the mock driver's controller, after
	// the lab's: e.g. "--state-file=" keeps its volumes in memory only (no
	// file written and synced per call, as test/harness/cmd/bench wants; a restart then
	// loses them), "-v=2" logs less than the lab's -v=5.
	ControllerArgs []string
	// BinDir, when set, holds the project's binaries (Binaries), e.g. the
	// bin/ of `make build`; by default Setup builds them into the cluster's
	// temp dir.
	BinDir string
}

// Binaries are the project's commands a Lab runs, from Config.BinDir or
// built by Setup.
var Binaries = []string{"mock-driver", "csi-provisioner", "csi-node-publisher", "csi-scheduler-extender", "csi-node-router"}

// Lab is a deployed mock driver and provisioner on a cluster.
type Lab struct {
	Cluster *controlplane.Cluster
	BinDir  string
	// AdminURL is the mock controller's admin endpoint.
	AdminURL string
	// Nodes maps node name to zone; Racks maps node name to rack.
	Nodes map[string]string
	Racks map[string]string

	cfg            Config
	socketDir      string
	controllerSock string
	provKubeconfig string
	pubKubeconfig  string
	provisioner    *controlplane.Process
	controller     *controlplane.Process
	controllerArgs []string
	provCount      int
	publishers     map[string]*controlplane.Process
	pubCount       int
}

// NodeSpec describes a node AddNode creates.
type NodeSpec struct {
	Name, Zone, Rack string
	// Driver runs the mock driver's node service and csi-node-publisher.
	Driver bool
	// MaxVolumes is the driver's max_volumes_per_node (0: no limit).
	MaxVolumes int64
	// DriverTopology, when set, is the segment the driver reports instead of
	// the node's labels (e.g. "zone=z1"), to provoke label collisions.
	DriverTopology string
}

// Setup builds the project's binaries (unless Config.BinDir has them),
// creates the nodes, starts a mock node service per node and publishes its
// CSINode entry, starts the mock controller and the provisioner.
func Setup(ctx context.Context, c *controlplane.Cluster, cfg Config) (*Lab, error) {
	l, err := newLab(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	for _, z := range cfg.Zones {
		for i := 0; i < cfg.NodesPerZone; i++ {
			if err := l.AddNode(ctx, NodeSpec{Name: fmt.Sprintf("node-%s-%c", z, 'a'+i), Zone: z, Rack: l.rackOf(i), Driver: true}); err != nil {
				return nil, err
			}
		}
	}
	if err := l.startController(); err != nil {
		return nil, err
	}
	if err := l.StartProvisioner(); err != nil {
		return nil, err
	}
	return l, nil
}

// newLab prepares a lab without nodes nor processes: the binaries, the
// namespace, the provisioner's and the publishers' ServiceAccounts with the
// RBAC of deploy/, and their kubeconfigs.
func newLab(ctx context.Context, c *controlplane.Cluster, cfg Config) (*Lab, error) {
	l := &Lab{Cluster: c, cfg: cfg, Nodes: map[string]string{}, Racks: map[string]string{}, publishers: map[string]*controlplane.Process{},
		BinDir: cfg.BinDir, socketDir: filepath.Join(c.Dir, "sockets")}
	if err := os.MkdirAll(l.socketDir, 0o755); err != nil {
		return nil, err
	}
	if err := l.binaries(ctx); err != nil {
		return nil, err
	}
	for _, f := range []string{"namespace.yaml", "provisioner-rbac.yaml", "node-publisher-rbac.yaml"} {
		if err := c.ApplyFile(ctx, filepath.Join(c.RepoRoot, "deploy", "kubernetes", "base", f), false); err != nil {
			return nil, err
		}
	}
	var err error
	if l.provKubeconfig, err = c.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-provisioner"); err != nil {
		return nil, err
	}
	if l.pubKubeconfig, err = c.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-node-publisher"); err != nil {
		return nil, err
	}
	return l, nil
}

// binaries checks that Config.BinDir has every binary, or builds them into
// the cluster's temp dir.
func (l *Lab) binaries(ctx context.Context) error {
	if l.BinDir == "" {
		l.BinDir = filepath.Join(l.Cluster.Dir, "bin")
		pkgs := make([]string, 0, len(Binaries))
		for _, b := range Binaries {
			pkgs = append(pkgs, "./cmd/"+b)
		}
		return controlplane.BuildProject(ctx, l.Cluster.RepoRoot, l.BinDir, pkgs...)
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(l.BinDir, b)); err != nil {
			return fmt.Errorf("binary %s missing (make build): %w", b, err)
		}
	}
	return nil
}

func (l *Lab) startController() error {
	type seg struct {
		Topology      map[string]string `json:"topology"`
		CapacityBytes int64             `json:"capacityBytes"`
	}
	var segs []seg
	for _, topo := range l.segments() {
		bytes := l.cfg.CapacityBytes
		if c, ok := l.cfg.ZoneCapacity[topo["zone"]]; ok {
			bytes = c
			if n := len(l.cfg.Racks); n > 0 {
				bytes = c / int64(n)
			}
		}
		segs = append(segs, seg{Topology: topo, CapacityBytes: bytes})
	}
	data, _ := json.Marshal(map[string]any{"segments": segs})
	segFile := filepath.Join(l.Cluster.Dir, "segments.json")
	if err := os.WriteFile(segFile, data, 0o644); err != nil {
		return err
	}
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	l.controllerSock = filepath.Join(l.socketDir, "controller.sock")
	// -v=5: every CSI request is logged (sanitized), which the log-secrecy
	// test relies on.
	l.controllerArgs = []string{
		"--mode=controller", "--endpoint=unix://" + l.controllerSock, "--segments-file=" + segFile,
		"--state-file=" + filepath.Join(l.Cluster.Dir, "mock-state.json"), "--admin-address=" + addr, "-v=5",
	}
	l.controllerArgs = append(l.controllerArgs, l.cfg.ControllerArgs...)
	l.AdminURL = "http://" + addr
	return l.launchController()
}

// launchController starts the mock controller with l.controllerArgs and
// waits for its admin endpoint.
func (l *Lab) launchController() error {
	ctrl, err := l.Cluster.StartProcess("mock-driver-controller", filepath.Join(l.BinDir, "mock-driver"), l.controllerArgs, nil)
	if err != nil {
		return err
	}
	l.controller = ctrl
	return waitHTTP(l.AdminURL+"/healthz", 30*time.Second)
}

func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url) //nolint:noctx // local, bounded by the deadline
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %v", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rackOf returns the rack of a zone's i-th node, "" without racks.
func (l *Lab) rackOf(i int) string {
	if len(l.cfg.Racks) == 0 {
		return ""
	}
	return l.cfg.Racks[i%len(l.cfg.Racks)]
}

// segments returns the mock driver's segments: every zone, times every rack.
func (l *Lab) segments() []map[string]string {
	var out []map[string]string
	for _, z := range l.cfg.Zones {
		if len(l.cfg.Racks) == 0 {
			out = append(out, map[string]string{"zone": z})
			continue
		}
		for _, r := range l.cfg.Racks {
			out = append(out, map[string]string{"zone": z, "rack": r})
		}
	}
	return out
}

// AddNode creates a Ready node. With a driver, it also runs the mock
// driver's node service for it and csi-node-publisher, which publishes the
// node's CSINode entry from NodeGetInfo, and waits for that entry.
func (l *Lab) AddNode(ctx context.Context, spec NodeSpec) error {
	labels := map[string]string{ZoneKey: spec.Zone}
	topo := "zone=" + spec.Zone
	if spec.Rack != "" {
		labels[RackKey] = spec.Rack
		topo += ",rack=" + spec.Rack
		l.Racks[spec.Name] = spec.Rack
	}
	if _, err := l.Cluster.CreateNode(ctx, spec.Name, labels, nil); err != nil {
		return err
	}
	l.Nodes[spec.Name] = spec.Zone
	if !spec.Driver {
		return nil
	}
	if spec.DriverTopology != "" {
		topo = spec.DriverTopology
	}
	if _, err := l.Cluster.StartProcess("mock-driver-"+spec.Name, filepath.Join(l.BinDir, "mock-driver"), []string{
		"--mode=node", "--node-id=" + spec.Name, "--node-topology=" + topo, "--endpoint=unix://" + l.nodeSocket(spec.Name),
		"--max-volumes-per-node=" + strconv.FormatInt(spec.MaxVolumes, 10), "-v=2",
	}, nil); err != nil {
		return err
	}
	return l.StartPublisher(ctx, spec.Name)
}

func (l *Lab) nodeSocket(node string) string { return filepath.Join(l.socketDir, node+".sock") }

// StartPublisher (re)starts the node's csi-node-publisher with extra flags
// and waits until the node's CSINode has an entry for the driver.
func (l *Lab) StartPublisher(ctx context.Context, node string, extra ...string) error {
	l.StopPublisher(node)
	l.pubCount++
	args := append([]string{
		"--csi-address=unix://" + l.nodeSocket(node), "--kubeconfig=" + l.pubKubeconfig, "--node-name=" + node,
		"--resync-period=10s", "--lease-namespace=" + PublisherNamespace, "-v=2",
	}, extra...)
	p, err := l.Cluster.StartProcess(fmt.Sprintf("csi-node-publisher-%s-%d", node, l.pubCount), filepath.Join(l.BinDir, "csi-node-publisher"), args, nil)
	if err != nil {
		return err
	}
	l.publishers[node] = p
	return l.Cluster.WaitFor(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("csi-node-publisher for %s exited: %v (log %s)", node, p.Wait(), p.LogPath())
		}
		cn, err := l.Cluster.Client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == DriverName {
				return true, nil
			}
		}
		return false, nil
	})
}

// StopPublisher stops the node's csi-node-publisher (SIGTERM).
func (l *Lab) StopPublisher(node string) {
	if p := l.publishers[node]; p != nil {
		p.Stop(15 * time.Second)
		delete(l.publishers, node)
	}
}

// Publisher returns the node's running csi-node-publisher, or nil.
func (l *Lab) Publisher(node string) *controlplane.Process { return l.publishers[node] }

// StartProvisioner (re)starts csi-provisioner with the lab's flags
// (Config.ProvisionerArgs included) plus extra flags, stopping a running one
// first.
func (l *Lab) StartProvisioner(extra ...string) error {
	return l.StartProvisionerBinary(filepath.Join(l.BinDir, "csi-provisioner"), extra...)
}

// StartProvisionerBinary is StartProvisioner with another provisioner
// binary, e.g. a build of upstream external-provisioner to compare with: the
// same flags, the same ServiceAccount, the same driver.
func (l *Lab) StartProvisionerBinary(binary string, extra ...string) error {
	return l.StartProvisionerBinaryEnv(binary, nil, extra...)
}

// StartProvisionerBinaryEnv is StartProvisionerBinary with env
// ("NAME=value") added to the process's environment, e.g. POD_NAME and
// NAMESPACE, which both provisioners read to find the owner of their
// capacity objects.
func (l *Lab) StartProvisionerBinaryEnv(binary string, env []string, extra ...string) error {
	l.StopProvisioner()
	l.provCount++
	p, err := l.startProvisionerFor("csi-provisioner-"+strconv.Itoa(l.provCount), binary, l.controllerSock, env,
		append(append([]string(nil), l.cfg.ProvisionerArgs...), extra...)...)
	if err != nil {
		return err
	}
	l.provisioner = p
	return nil
}

// StartProvisionerReplica starts one more csi-provisioner process named
// name, with the lab's flags plus extra, under the provisioner's
// ServiceAccount. The caller stops it (the cluster stops it at the end).
func (l *Lab) StartProvisionerReplica(name string, extra ...string) (*controlplane.Process, error) {
	return l.startProvisioner(name, filepath.Join(l.BinDir, "csi-provisioner"), extra...)
}

func (l *Lab) startProvisioner(name, binary string, extra ...string) (*controlplane.Process, error) {
	return l.startProvisionerFor(name, binary, l.controllerSock, nil, append(append([]string(nil), l.cfg.ProvisionerArgs...), extra...)...)
}

// startProvisionerFor starts csi-provisioner under its ServiceAccount with
// the lab's retry flags, for the driver at socket, with env added to its
// environment and extra flags after the lab's.
func (l *Lab) startProvisionerFor(name, binary, socket string, env []string, extra ...string) (*controlplane.Process, error) {
	args := append([]string{
		"--csi-address=unix://" + socket, "--kubeconfig=" + l.provKubeconfig,
		"--retry-interval-start=500ms", "--retry-interval-max=5s", "-v=3",
	}, extra...)
	return l.Cluster.StartProcess(name, binary, args, env)
}

// StopProvisioner stops the running provisioner (SIGTERM).
func (l *Lab) StopProvisioner() {
	if l.provisioner != nil {
		l.provisioner.Stop(15 * time.Second)
		l.provisioner = nil
	}
}

// ControllerSocket is the mock controller's CSI socket (a path), for tests
// that call the driver as a sidecar other than the provisioner would (e.g.
// CreateSnapshot, as the snapshotter).
func (l *Lab) ControllerSocket() string { return l.controllerSock }

// ControllerLogPath is the log file of the mock driver's controller.
func (l *Lab) ControllerLogPath() string { return l.controller.LogPath() }

// Provisioner returns the running provisioner process.
func (l *Lab) Provisioner() *controlplane.Process { return l.provisioner }

// Volumes lists the mock driver's volumes.
func (l *Lab) Volumes(ctx context.Context) ([]state.Volume, error) {
	var out []state.Volume
	return out, l.admin(ctx, http.MethodGet, "/volumes", nil, &out)
}

// CreateRequests lists the CreateVolume requests the mock driver received.
func (l *Lab) CreateRequests(ctx context.Context) ([]driver.CreateRecord, error) {
	var out []driver.CreateRecord
	return out, l.admin(ctx, http.MethodGet, "/requests?method=CreateVolume", nil, &out)
}

// Calls lists the Controller calls of method ("" for all) the mock
// driver answered, oldest first, numbered by Seq.
func (l *Lab) Calls(ctx context.Context, method string) ([]driver.CallRecord, error) {
	var out []driver.CallRecord
	return out, l.admin(ctx, http.MethodGet, "/requests?method="+url.QueryEscape(method), nil, &out)
}

// Segments returns the mock driver's segments with capacity and usage.
func (l *Lab) Segments(ctx context.Context) ([]driver.SegmentStatus, error) {
	var out []driver.SegmentStatus
	return out, l.admin(ctx, http.MethodGet, "/segments", nil, &out)
}

// SetSegmentCapacity sets one segment's capacity in the mock driver.
func (l *Lab) SetSegmentCapacity(ctx context.Context, topology map[string]string, bytes int64) error {
	return l.admin(ctx, http.MethodPut, "/segments", map[string]any{"topology": topology, "capacityBytes": bytes}, nil)
}

// SetCapacity sets the capacity of every segment of a zone in the mock
// driver.
func (l *Lab) SetCapacity(ctx context.Context, zone string, bytes int64) error {
	for _, topo := range l.segments() {
		if topo["zone"] != zone {
			continue
		}
		if err := l.admin(ctx, http.MethodPut, "/segments", map[string]any{"topology": topo, "capacityBytes": bytes}, nil); err != nil {
			return err
		}
	}
	return nil
}

// SetFaults replaces the mock driver's fault rules (nil clears them).
func (l *Lab) SetFaults(ctx context.Context, rules []faults.Rule) error {
	if rules == nil {
		rules = []faults.Rule{}
	}
	return l.admin(ctx, http.MethodPut, "/faults", rules, nil)
}

func (l *Lab) admin(ctx context.Context, method, path string, in, out any) error {
	return AdminCall(ctx, l.AdminURL, method, path, in, out)
}

// AdminCall calls a mock driver's admin endpoint at base (http://host:port):
// in, when not nil, is sent as JSON and the answer decoded into out, when
// not nil.
func AdminCall(ctx context.Context, base, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// FreeAddr returns a free 127.0.0.1:port that no earlier call of this
// process returned (controlplane.FreePorts).
func FreeAddr() (string, error) { return controlplane.FreeAddr() }

// ZonesAndRacks is the lab of the packages that split test/e2e by concern
// (test/e2e, test/e2estock, test/e2epublisher): zones z1–z3 with racks r1
// and r2, two nodes per zone, 100 GiB per zone.
func ZonesAndRacks() Config {
	return Config{Zones: []string{"z1", "z2", "z3"}, Racks: []string{"r1", "r2"}, NodesPerZone: 2, CapacityBytes: 100 << 30}
}
