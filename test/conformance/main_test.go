package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	zoneKey = lab.ZoneKey
	gi      = int64(1) << 30
	// caseTimeout bounds each wait of a case on one side.
	caseTimeout = 60 * time.Second
)

// zones are the cluster's zones, one node each (node-<zone>).
var zones = []string{"z1", "z2", "z3"}

var (
	deployRBAC = flag.Bool("conformance.deploy-rbac", os.Getenv("CONFORMANCE_DEPLOY_RBAC") == "1",
		"run ours under deploy/'s RBAC (env CONFORMANCE_DEPLOY_RBAC=1); by default both sides run under upstream's "+
			"unmodified rbac.yaml, as a vendor swapping the image would")
	repeat = flag.Int("conformance.repeat", envInt("CONFORMANCE_REPEAT", 1), "run every case this many times (a bigger corpus; env CONFORMANCE_REPEAT)")
	env    *harness
)

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n < 1 {
		return def
	}
	return n
}

// side is one of the two provisioners compared.
type side struct {
	// name is "ours" or "upstream"; short is its namespace suffix.
	name, short string
}

var (
	ours     = side{"ours", "o"}
	upstream = side{"upstream", "u"}
	sides    = []side{ours, upstream}
)

// driverName is the mock driver name of a profile and side; both sides of
// profileMigration serve the migration target's name.
func driverName(p profile, s side) string {
	if p == profileMigration {
		return ebsDriver
	}
	return fmt.Sprintf("%s-%s.conformance.example.com", p, s.name)
}

// instance is a running mock controller and provisioner.
type instance struct {
	driver     string
	adminURL   string
	socket     string
	metricsURL string
	mock, prov *controlplane.Process
}

// stop stops the provisioner, then the mock controller.
func (in *instance) stop() {
	if in == nil {
		return
	}
	for _, p := range []*controlplane.Process{in.prov, in.mock} {
		if p != nil {
			p.Stop(15 * time.Second)
		}
	}
}

// harness is the deployed pair of provisioners.
type harness struct {
	cluster  *controlplane.Cluster
	client   kubernetes.Interface
	binDir   string
	upstream controlplane.Upstream
	// kubeconf is upstream's ServiceAccount's kubeconfig; ourKubeconf ours.
	kubeconf, ourKubeconf string
	instances             map[profile]map[side]*instance
}

func (h *harness) inst(p profile, s side) *instance { return h.instances[p][s] }

func TestMain(m *testing.M) {
	flag.Parse()
	if *update {
		// Only the doc is rewritten: no control plane.
		os.Exit(m.Run())
	}
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{SnapshotCRDs: true,
		APIServerArgs: []string{crossNamespaceGate}}, func(ctx context.Context, c *controlplane.Cluster) error {
		var err error
		env, err = setup(ctx, c)
		return err
	}))
}

// setup builds (or finds) upstream's binary, creates the nodes with a
// CSINode entry for every driver, applies upstream's RBAC and starts a mock
// controller and a provisioner per profile and side.
func setup(ctx context.Context, c *controlplane.Cluster) (*harness, error) {
	h := &harness{cluster: c, client: c.Client, binDir: os.Getenv(controlplane.BinDirEnv), instances: map[profile]map[side]*instance{}}
	if h.binDir == "" {
		h.binDir = filepath.Join(c.Dir, "bin")
		if err := controlplane.BuildProject(ctx, c.RepoRoot, h.binDir, "./cmd/mock-driver", "./cmd/csi-provisioner"); err != nil {
			return nil, err
		}
	}
	var err error
	if h.upstream, err = controlplane.BuildUpstream(ctx, c.RepoRoot); err != nil {
		return nil, err
	}
	if err := c.InstallReferenceGrantCRD(ctx); err != nil {
		return nil, err
	}
	if err := h.rbac(ctx); err != nil {
		return nil, err
	}
	var drivers []string
	for p := range profiles {
		for _, s := range sides {
			drivers = append(drivers, driverName(p, s))
		}
	}
	if err := h.nodes(ctx, drivers); err != nil {
		return nil, err
	}
	return h, h.startAll(ctx)
}

// startAll starts every profile's instances of both sides at once (each
// waits for its own mock driver and provisioner) and returns the first
// error.
func (h *harness) startAll(ctx context.Context) error {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	for p := range profiles {
		h.instances[p] = map[side]*instance{}
	}
	for p, spec := range profiles {
		for _, s := range sides {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in, err := h.start(ctx, p, s, spec)
				mu.Lock()
				defer mu.Unlock()
				h.instances[p][s] = in
				if err != nil && first == nil {
					first = err
				}
			}()
		}
	}
	wg.Wait()
	return first
}

// rbac applies upstream's unmodified rbac.yaml (ServiceAccount
// default/csi-provisioner) plus what a vendor of upstream adds for the
// features the corpus uses: get and list on secrets and get, list and
// watch on ReferenceGrants (rules upstream's file carries commented out)
// and get on VolumeAttributesClasses (upstream reads a claim's class with
// a GET; its file grants nothing on them). Both
// sides run under this ServiceAccount, as a vendor swapping the image
// would; with -conformance.deploy-rbac ours runs under deploy/'s
// (csi-topology/csi-provisioner, with the same additions) instead.
func (h *harness) rbac(ctx context.Context) error {
	if err := h.cluster.ApplyFile(ctx, h.upstream.RBAC(), false); err != nil {
		return err
	}
	for _, f := range []string{"namespace.yaml", "provisioner-rbac.yaml"} {
		if err := h.cluster.ApplyFile(ctx, filepath.Join(h.cluster.RepoRoot, "deploy", "kubernetes", "base", f), false); err != nil {
			return err
		}
	}
	extras := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: conformance-provisioner-extras
rules:
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list"]
- apiGroups: ["storage.k8s.io"]
  resources: ["volumeattributesclasses"]
  verbs: ["get"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["referencegrants"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: conformance-provisioner-extras
subjects:
- kind: ServiceAccount
  name: csi-provisioner
  namespace: default
- kind: ServiceAccount
  name: csi-provisioner
  namespace: csi-topology
roleRef:
  kind: ClusterRole
  name: conformance-provisioner-extras
  apiGroup: rbac.authorization.k8s.io
`
	if err := h.cluster.ApplyYAML(ctx, []byte(extras), false); err != nil {
		return err
	}
	var err error
	if h.kubeconf, err = h.cluster.ServiceAccountKubeconfig(ctx, "default", "csi-provisioner"); err != nil {
		return err
	}
	h.ourKubeconf = h.kubeconf
	if *deployRBAC {
		h.ourKubeconf, err = h.cluster.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-provisioner")
	}
	return err
}

// nodes creates node-<zone> for every zone and its CSINode with an entry
// for every driver (node ID = node name, the zone key) and for the
// migration target (its own zone key), as each driver's node plugin would
// register through kubelet. The nodes carry the zone under the mock's key,
// the migration target's and the well-known one.
func (h *harness) nodes(ctx context.Context, drivers []string) error {
	for _, z := range zones {
		name := "node-" + z
		node, err := h.cluster.CreateNode(ctx, name, map[string]string{zoneKey: z, ebsZoneKey: ebsZones[z], v1.LabelTopologyZone: ebsZones[z]}, nil)
		if err != nil {
			return err
		}
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}}}
		for _, d := range drivers {
			cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name, TopologyKeys: []string{zoneKey}})
		}
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: ebsDriver, NodeID: name, TopologyKeys: []string{ebsZoneKey}})
		if _, err := h.client.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("CSINode %s: %w", name, err)
		}
	}
	return nil
}

// start runs the mock controller of driverName(p, s) and its provisioner,
// ours or upstream's, with the same flags (and upstream's own of the
// profile).
func (h *harness) start(ctx context.Context, p profile, s side, spec profileSpec) (*instance, error) {
	in := &instance{driver: driverName(p, s), socket: filepath.Join(h.cluster.Dir, fmt.Sprintf("%s-%s.sock", p, s.name))}
	segs := make([]string, 0, len(zones))
	for _, z := range zones {
		key, zone := zoneKey, z
		if p == profileMigration {
			key, zone = ebsZoneKey, ebsZones[z]
		}
		segs = append(segs, fmt.Sprintf(`{"topology":{%q:%q},"capacityBytes":%d}`, key, zone, 1000*gi))
	}
	segFile := filepath.Join(h.cluster.Dir, fmt.Sprintf("segments-%s-%s.json", p, s.name))
	if err := os.WriteFile(segFile, []byte(`{"segments":[`+strings.Join(segs, ",")+`]}`), 0o644); err != nil {
		return nil, err
	}
	admin, err := lab.FreeAddr()
	if err != nil {
		return nil, err
	}
	in.adminURL = "http://" + admin
	mockArgs := spec.mockArgs
	if spec.mockFaults != "" {
		faultsFile := filepath.Join(h.cluster.Dir, fmt.Sprintf("faults-%s-%s.json", p, s.name))
		if err := os.WriteFile(faultsFile, []byte(spec.mockFaults), 0o644); err != nil {
			return nil, err
		}
		mockArgs = append(append([]string(nil), mockArgs...), "--faults-file="+faultsFile)
	}
	// Regional snapshots, as the zonal disks of the clouds (EBS, PD, Azure
	// Disk) have: a restore may be made in any zone (source/snapshot-wffc-
	// other-zone); clones stay in their source's zone.
	if in.mock, err = h.cluster.StartProcess(fmt.Sprintf("mock-%s-%s", p, s.name), filepath.Join(h.binDir, "mock-driver"), append([]string{
		"--mode=controller", "--name=" + in.driver, "--endpoint=unix://" + in.socket, "--segments-file=" + segFile,
		"--admin-address=" + admin, "--regional-snapshots", "-v=2",
	}, mockArgs...), nil); err != nil {
		return nil, err
	}
	if err := h.cluster.WaitFor(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		return lab.AdminCall(ctx, in.adminURL, "GET", "/healthz", nil, nil) == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("mock controller %s: %w", in.driver, err)
	}
	metrics, err := lab.FreeAddr()
	if err != nil {
		return nil, err
	}
	in.metricsURL = "http://" + metrics + "/metrics"
	binary, kubeconf := filepath.Join(h.binDir, "csi-provisioner"), h.ourKubeconf
	if s == upstream {
		binary, kubeconf = h.upstream.Provisioner, h.kubeconf
	}
	args := append([]string{
		"--csi-address=unix://" + in.socket, "--kubeconfig=" + kubeconf, "--leader-election=false",
		"--feature-gates=Topology=true", "--extra-create-metadata", "--http-endpoint=" + metrics,
		"--retry-interval-start=500ms", "--retry-interval-max=4s", "--timeout=10s", "-v=4",
	}, spec.flags...)
	if s == upstream {
		args = append(args, spec.upstreamFlags...)
	}
	if in.prov, err = h.cluster.StartProcess(fmt.Sprintf("provisioner-%s-%s", p, s.name), binary, args, spec.env); err != nil {
		return nil, err
	}
	return in, h.cluster.WaitFor(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		if in.prov.Exited() {
			return false, fmt.Errorf("%s provisioner of %s exited: %v\n%s", s.name, p, in.prov.Wait(), in.prov.LogTail(20))
		}
		_, err := lab.Scrape(ctx, in.metricsURL)
		return err == nil, nil
	})
}
