package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// The node scenario: one csi-provisioner --node-deployment, the instance of
// one fake node, beside a node-local mock driver (--mode=both, the node
// itself as its segment, as the overlay node-local runs it), on a cluster
// whose other nodes hold BackgroundClaims bound claims of the driver. Every
// instance of a node deployment watches every claim and PV of the cluster:
// the background is what it costs one instance.
const (
	// nodeLocalClass is the node-local class (WaitForFirstConsumer), as
	// csi-node-local of the component.
	nodeLocalClass = "bench-node-local"
	// hostnameKey is the node-local driver's topology key.
	hostnameKey = "kubernetes.io/hostname"
	// backgroundNamespace holds the background claims.
	backgroundNamespace = "bench-background"
	// Annotations the scheduler and the PV controller put on a claim.
	annSelectedNode           = lab.AnnSelectedNode
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// pvFinalizer is the provisioning library's finalizer on the PVs it
	// creates.
	pvFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"
)

// nodeArgs are the flags of csi-provisioner in the node DaemonSet
// (deploy/kubernetes/components/node-deployment/node-patch.yaml), without
// the HTTP endpoint and at the bench's -v (commonArgs).
var nodeArgs = []string{"--node-deployment", "--node-deployment-immediate-binding=true", "--node-deployment-base-delay=20s",
	"--node-deployment-max-delay=1m", "--enable-capacity", "--capacity-namespace=" + lab.CapacityNamespace,
	"--capacity-poll-interval=1m", "--timeout=60s", "--worker-threads=4"}

// nodeLocal is the node scenario's part of a size's cluster, prepared once.
type nodeLocal struct {
	node       string // the instance's node
	socket     string
	adminURL   string
	kubeconfig string
	driver     *controlplane.Process
	// backgroundSetup is how long the background took (0 once reported).
	backgroundSetup time.Duration
}

// prepareNode creates the node-local class, makes the first fake node's
// CSINode entry the node-local driver's, grants the node deployment's RBAC,
// starts the node-local mock driver and creates the background, once.
func (e *env) prepareNode(ctx context.Context) (*nodeLocal, error) {
	if e.nodeLocal != nil {
		return e.nodeLocal, nil
	}
	if e.size < 2 {
		return nil, fmt.Errorf("the node scenario needs 2 nodes or more (the background is on the others), not %d", e.size)
	}
	n := &nodeLocal{node: nodeName(0), socket: filepath.Join(e.cluster.Dir, "node-driver.sock")}
	if err := e.createNodeLocalClass(ctx); err != nil {
		return nil, err
	}
	if err := e.useHostnameKey(ctx, n.node); err != nil {
		return nil, err
	}
	var err error
	if n.kubeconfig, err = e.nodeKubeconfig(ctx); err != nil {
		return nil, err
	}
	addr, err := lab.FreeAddr()
	if err != nil {
		return nil, err
	}
	n.adminURL = "http://" + addr
	// Volumes in memory, few logs, as the lab's controller in the bench;
	// room for everything.
	if n.driver, err = e.cluster.StartProcess("mock-driver-"+n.node, filepath.Join(e.lab.BinDir, "mock-driver"), []string{
		"--mode=both", "--node-id=" + n.node, "--node-topology=" + hostnameKey + "=" + n.node,
		"--capacity-bytes=" + strconv.FormatInt(1<<50, 10), "--endpoint=unix://" + n.socket, "--admin-address=" + addr,
		"--state-file=", "-v=1",
	}, nil); err != nil {
		return nil, err
	}
	if err := e.cluster.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		if n.driver.Exited() {
			return false, fmt.Errorf("node-local mock driver exited: %v (log %s)", n.driver.Wait(), n.driver.LogPath())
		}
		var vols []state.Volume
		return n.volumes(ctx, &vols) == nil, nil
	}); err != nil {
		return nil, err
	}
	if e.opts.BackgroundClaims > 0 {
		start := time.Now()
		if err := e.createBackground(ctx); err != nil {
			return nil, fmt.Errorf("background claims: %w", err)
		}
		n.backgroundSetup = time.Since(start)
	}
	e.nodeLocal = n
	return n, nil
}

// createNodeLocalClass creates the node-local class (WaitForFirstConsumer,
// reclaim Delete), unless it exists.
func (e *env) createNodeLocalClass(ctx context.Context) error {
	_, err := e.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: nodeLocalClass}, Provisioner: lab.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete),
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// useHostnameKey makes node's CSINode entry of the driver what
// csi-node-publisher publishes for a node-local driver: the node itself as
// its segment (a driver entry is immutable: the CSINode is made again).
func (e *env) useHostnameKey(ctx context.Context, node string) error {
	cn, err := e.client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range cn.Spec.Drivers {
		if cn.Spec.Drivers[i].Name == lab.DriverName {
			if len(cn.Spec.Drivers[i].TopologyKeys) == 1 && cn.Spec.Drivers[i].TopologyKeys[0] == hostnameKey {
				return nil
			}
			cn.Spec.Drivers[i].TopologyKeys = []string{hostnameKey}
		}
	}
	if err := e.client.StorageV1().CSINodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		return err
	}
	cn.ObjectMeta = metav1.ObjectMeta{Name: cn.Name, OwnerReferences: cn.OwnerReferences}
	_, err = e.client.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{})
	return err
}

// nodeKubeconfig grants the node deployment's RBAC (the component's
// provisioner-rbac.yaml) and returns a kubeconfig of its ServiceAccount
// csi-node-provisioner.
func (e *env) nodeKubeconfig(ctx context.Context) (string, error) {
	rbac := filepath.Join(e.cluster.RepoRoot, "deploy", "kubernetes", "components", "node-deployment", "provisioner-rbac.yaml")
	if err := e.cluster.ApplyFile(ctx, rbac, false); err != nil {
		return "", err
	}
	return e.cluster.ServiceAccountKubeconfig(ctx, lab.PublisherNamespace, "csi-node-provisioner")
}

// nodeName is the name createNodes gives node i.
func nodeName(i int) string { return fmt.Sprintf("bench-node-%05d", i) }

// createBackground creates BackgroundClaims claims of the node-local class
// on the nodes other than the first (the instance's), round robin, each bound to a PV of its node
// as the node's instance would have made it (CSI source of the driver,
// node affinity to the node, the library's finalizer), and waits until the
// PV controller has bound them all. A claim is created first, then its PV
// with the claim's UID in claimRef: the PV controller binds them with three
// writes, and finds nothing to do afterwards (no Event, no periodic write;
// a pending claim would get an ExternalProvisioning Event at every resync
// of the PV controller).
func (e *env) createBackground(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	n := e.opts.BackgroundClaims
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: backgroundNamespace}},
		metav1.CreateOptions{}); err != nil {
		return err
	}
	o, err := observe(ctx, e.client, backgroundNamespace, n)
	if err != nil {
		return err
	}
	defer o.Stop()
	start := time.Now()
	err = parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		node := nodeName(1 + i%(e.size-1))
		c := claim(i, nodeLocalClass)
		c.Name = fmt.Sprintf("bg-%05d", i)
		// Labelled as csi-node-router labels a placed claim: the background
		// is the same for both selections, and an instance selecting by
		// label must not receive it.
		c.Labels = map[string]string{"app": "bench-background", nodelabel.Key: nodelabel.NodeValue(node)}
		c.Annotations = map[string]string{annSelectedNode: node, annStorageProvisioner: lab.DriverName, annBetaStorageProvisioner: lab.DriverName}
		c.Spec.VolumeName = "pvc-bg-" + strconv.Itoa(i)
		c, err := e.client.CoreV1().PersistentVolumeClaims(backgroundNamespace).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		_, err = e.client.CoreV1().PersistentVolumes().Create(ctx, backgroundPV(c, node), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	created := time.Since(start)
	logger.Info("Background created, waiting for the PV controller to bind it", "claims", n, "took", created.Round(time.Second))
	if err := o.waitUntil(ctx, e.runTimeout(), func() error { return nil }, func(_, _, bound, _ int) bool { return bound >= n }); err != nil {
		return fmt.Errorf("binding: %w", err)
	}
	logger.Info("Background bound", "claims", n, "created", created.Round(time.Second), "bound", time.Since(start).Round(time.Second))
	return nil
}

// backgroundPV is the PV the instance of node would have created for c.
func backgroundPV(c *v1.PersistentVolumeClaim, node string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: c.Spec.VolumeName, Finalizers: []string{pvFinalizer},
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": lab.DriverName},
			Labels:      map[string]string{nodelabel.Key: nodelabel.NodeValue(node)}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: *resourceGi},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: lab.DriverName, VolumeHandle: "bg-" + string(c.UID), FSType: "ext4",
				VolumeAttributes: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-0-" + lab.DriverName},
			}},
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: c.Namespace, Name: c.Name,
				UID: c.UID, ResourceVersion: c.ResourceVersion},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              nodeLocalClass,
			VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: hostnameKey, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// runNode is the node scenario with contender's provisioner: the instance
// starts on the cluster with its background, then N claims selected for
// its node are created at once.
func (e *env) runNode(ctx context.Context, contender string, rep int) (Result, error) {
	n := e.opts.Claims
	r := e.newResult("node", contender, rep)
	r.BackgroundClaims = e.opts.BackgroundClaims
	if contender == ours {
		// The instance's extra flags (e.g. the selection), in the tables.
		r.Deployment = strings.Join(e.opts.NodeArgs, " ")
	}
	nl, err := e.prepareNode(ctx)
	if err != nil {
		return r, err
	}
	r.BackgroundSetup, nl.backgroundSetup = nl.backgroundSetup.Seconds(), 0
	ns, err := e.namespace(ctx, "node")
	if err != nil {
		return r, err
	}
	o, err := observe(ctx, e.client, ns, n)
	if err != nil {
		return r, err
	}
	defer o.Stop()
	prof, pargs, err := e.startProfiler(ctx, fmt.Sprintf("node-%s-rep%d", contender, rep), 20)
	if err != nil {
		return r, err
	}
	binary := e.provisionerBinary(contender)
	args, env, endpoint, err := e.nodeInstanceArgs(nl, contender, pargs, prof.endpoint())
	if err != nil {
		return r, err
	}
	router, skip, err := e.startRouter(contender, false)
	if err != nil || skip != "" {
		return r, errors.Join(err, errorIf(skip))
	}
	if router != nil {
		defer router.Stop(15 * time.Second)
	}
	e.runs++
	l, err := e.launchWith(ctx, contender, binary, o, func() (*controlplane.Process, error) {
		return e.cluster.StartProcess(fmt.Sprintf("csi-provisioner-node-%d", e.runs), binary, args, env)
	})
	if err != nil {
		return r, err
	}
	defer l.proc.Stop(15 * time.Second)
	start := time.Now()
	created, err := e.createSpreadClaims(ctx, ns, []string{nl.node}, n)
	if err != nil {
		return r, err
	}
	if err := o.waitUntil(ctx, e.runTimeout(), l.alive, func(_, _, bound, _ int) bool { return bound >= n }); err != nil {
		return r, err
	}
	e.finishCreate(ctx, &r, o, l, start, created)
	prof.heap(ctx)
	e.checkNodeVolumes(ctx, &r, o, nl, ns)
	// Upstream has no metric of its informers' events.
	if contender == ours {
		if r.OtherNodeChanges, r.OtherNodeEvents, err = e.otherNodeEvents(ctx, "http://"+endpoint+"/metrics", ns); err != nil {
			r.Failures = append(r.Failures, err.Error())
		}
	}
	if err := e.cleanUp(ctx, ns, o, l); err != nil {
		return r, err
	}
	var vols []state.Volume
	if err := nl.volumes(ctx, &vols); err != nil || len(vols) != 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("after the run's claims were deleted: %d volumes left on the node (%v)", len(vols), err))
	}
	r.PeakRSSDeleted, _ = peakRSSMB(l.proc.Pid())
	prefix := fmt.Sprintf("node-%dnodes-%s-rep%d-", e.size, contender, rep)
	e.keep(ctx, l.proc.LogPath(), prefix+"csi-provisioner.log")
	e.keep(ctx, e.cluster.AuditLog, prefix+"audit.log")
	return r, nil
}

// nodeInstanceArgs returns the flags and environment of the node
// scenario's instance: the DaemonSet's flags (upstream's spelling for
// theirs) with an HTTP endpoint (the profiler's, or a free one) and the
// endpoint.
func (e *env) nodeInstanceArgs(nl *nodeLocal, contender string, pargs []string, endpoint string) (args, env []string, _ string, err error) {
	args = append([]string{"--csi-address=unix://" + nl.socket, "--kubeconfig=" + nl.kubeconfig}, commonArgs...)
	env = []string{"NODE_NAME=" + nl.node}
	if endpoint == "" {
		if endpoint, err = lab.FreeAddr(); err != nil {
			return nil, nil, "", err
		}
		pargs = []string{"--http-endpoint=" + endpoint}
	}
	if contender == theirs {
		args = append(args, upstreamNodeArgs...)
		env = append(env, "NAMESPACE="+lab.CapacityNamespace)
	} else {
		args = append(append(args, nodeArgs...), e.opts.NodeArgs...)
	}
	return append(append(args, pargs...), e.opts.ProvisionerArgs...), env, endpoint, nil
}

// keep copies a file of the cluster (which goes with it) into the output
// directory, if there is one.
func (e *env) keep(ctx context.Context, path, name string) {
	if e.opts.Out == "" {
		return
	}
	err := os.MkdirAll(e.opts.Out, 0o755)
	if err == nil {
		var data []byte
		if data, err = os.ReadFile(path); err == nil {
			err = os.WriteFile(filepath.Join(e.opts.Out, name), data, 0o644)
		}
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Keeping a log", "path", path)
	}
}

// checkNodeVolumes checks, after a node run, that the node's driver holds
// exactly the run's volumes, each in the node's segment and behind a PV
// that requires the node, that every claim of the run is Bound, and that
// the instance created exactly one PV per claim.
func (e *env) checkNodeVolumes(ctx context.Context, r *Result, o *observer, nl *nodeLocal, ns string) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	var vols []state.Volume
	if err := nl.volumes(ctx, &vols); err != nil {
		fail("listing the node driver's volumes: %v", err)
		return
	}
	byID := map[string]state.Volume{}
	for _, v := range vols {
		byID[v.ID] = v
		if v.Segment[hostnameKey] != nl.node {
			fail("volume %s in segment %v, not the node's", v.ID, v.Segment)
		}
	}
	pvs, err := e.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		fail("listing PVs: %v", err)
		return
	}
	runPVs := 0
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Namespace != ns {
			continue
		}
		runPVs++
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != lab.DriverName {
			fail("PV %s is not the driver's", pv.Name)
			continue
		}
		if _, ok := byID[pv.Spec.CSI.VolumeHandle]; !ok {
			fail("PV %s: volume %s not in the node's driver", pv.Name, pv.Spec.CSI.VolumeHandle)
		}
		if got := pvNode(&pv); got != nl.node {
			fail("PV %s requires node %q, want %q", pv.Name, got, nl.node)
		}
	}
	if runPVs != r.Volumes || len(vols) != r.Volumes {
		fail("%d PVs and %d volumes on the node for the run's %d claims", runPVs, len(vols), r.Volumes)
	}
	o.mu.Lock()
	bound := len(o.bound)
	o.mu.Unlock()
	if bound != r.Volumes {
		fail("%d of %d claims Bound", bound, r.Volumes)
	}
	if got := r.Requests["create persistentvolumes"]; got != r.Volumes {
		fail("the instance created %d PVs, want %d", got, r.Volumes)
	}
}

// pvNode returns the node a PV's node affinity requires ("" without one).
func pvNode(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, req := range term.MatchExpressions {
			if req.Key == hostnameKey && len(req.Values) == 1 {
				return req.Values[0]
			}
		}
	}
	return ""
}

// volumes lists the node-local driver's volumes (its admin endpoint).
func (n *nodeLocal) volumes(ctx context.Context, out *[]state.Volume) error {
	return lab.AdminCall(ctx, n.adminURL, http.MethodGet, "/volumes", nil, out)
}

// errorIf returns an error saying why, or nil for "".
func errorIf(why string) error {
	if why == "" {
		return nil
	}
	return errors.New(why)
}
