package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// resourceGi is the size of every claim.
var resourceGi = resource.NewQuantity(1<<30, resource.BinarySI)

// Storage classes of the benchmark.
const (
	immediateClass = "bench-immediate"
	delayedClass   = "bench-wffc"
)

// fastControllerManagerQPS is kube-controller-manager's --kube-api-qps by
// default without --bind-through-contender: the PV controller marks, binds
// and releases every claim, and at its default 20 requests/s it, not the
// provisioner, would set the pace of every figure.
const fastControllerManagerQPS = 2000

// controllerManagerArgs are kube-controller-manager's flags for qps
// (Options.ControllerManagerQPS): none for 0, its defaults.
func controllerManagerArgs(qps int) []string {
	if qps == 0 {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(2*qps)}
}

// env is one size's cluster: a control plane that audits the provisioner's
// requests, size fake Ready nodes with CSINodes, the mock driver's
// controller and the lab's provisioner deployment (stopped between runs).
type env struct {
	opts    Options
	size    int
	cluster *controlplane.Cluster
	lab     *lab.Lab
	// client is the benchmark's own admin client (protobuf, a high rate).
	client kubernetes.Interface
	nodes  map[string]string
	// secondScheduler is csi-topology-scheduler, once a wffc run started it.
	secondScheduler *controlplane.Process
	// nodeLocal is the node scenario's driver and background, once a node
	// run prepared them.
	nodeLocal *nodeLocal
	// fleet is the nodes scenario's instance nodes and drivers, once a
	// nodes run prepared them.
	fleet *fleet
	runs  int
}

// setUp starts the control plane and deploys the lab on size nodes.
func setUp(ctx context.Context, opts Options, size int) (_ *env, err error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	c, err := controlplane.Start(ctx, controlplane.Options{RepoRoot: opts.RepoRoot, AuditPolicy: auditPolicy,
		ControllerManagerArgs: controllerManagerArgs(opts.ControllerManagerQPS)})
	if err != nil {
		return nil, err
	}
	e := &env{opts: opts, size: size, cluster: c}
	defer func() {
		if err != nil {
			c.DumpLogs(os.Stderr, 20)
			_ = c.Stop()
		}
	}()
	zones := zonesFor(size)
	// The mock driver's segments are the zones, with room for everything.
	if e.lab, err = lab.Setup(ctx, c, lab.Config{Zones: zones, CapacityBytes: 1 << 60, BinDir: opts.BinDir,
		// The driver must not be what is measured: volumes in memory
		// (not a state file rewritten and synced per call), few logs.
		ControllerArgs: []string{"--state-file=", "-v=1"}}); err != nil {
		return nil, err
	}
	e.lab.StopProvisioner()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if e.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.nodes, err = createNodes(ctx, e.client, size, zones, 16); err != nil {
		return nil, err
	}
	if err := e.createClasses(ctx); err != nil {
		return nil, err
	}
	logger.Info("Cluster ready", "nodes", size, "zones", len(zones), "took", time.Since(start).Round(time.Second), "logs", c.LogDir)
	return e, nil
}

func (e *env) createClasses(ctx context.Context) error {
	immediate, delayed := storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer
	for name, mode := range map[string]*storagev1.VolumeBindingMode{immediateClass: &immediate, delayedClass: &delayed} {
		if _, err := e.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: lab.DriverName, VolumeBindingMode: mode,
			ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete),
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// tearDown stops the cluster.
func (e *env) tearDown() {
	_ = e.cluster.Stop()
	e.fleet.Stop()
}

// namespace creates a fresh namespace for one run.
func (e *env) namespace(ctx context.Context, scenario string) (string, error) {
	e.runs++
	name := fmt.Sprintf("bench-%d-%s", e.runs, scenario)
	_, err := e.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return name, err
}

// claim returns claim i of a run.
func claim(i int, class string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%05d", i)},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resourceGi}}},
	}
}

// createClaims creates n claims of class in ns, workers at once, and
// returns when each was created.
func (e *env) createClaims(ctx context.Context, ns, class string, n int) (map[string]time.Time, error) {
	created := make([]time.Time, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		if _, err := e.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(i, class), metav1.CreateOptions{}); err != nil {
			return err
		}
		created[i] = time.Now()
		return nil
	})
	out := make(map[string]time.Time, n)
	for i, t := range created {
		out[claim(i, class).Name] = t
	}
	return out, err
}

// annStorageProvisioner is the PV controller's mark on a claim for an
// external provisioner: the provisioning library acts only on marked claims.
const annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"

// waitMarked waits until the PV controller has marked the n claims of ns
// for the driver, so that a backlog is all there when the provisioner
// starts.
func (e *env) waitMarked(ctx context.Context, ns string, n int) error {
	return e.cluster.WaitFor(ctx, e.runTimeout(), func(ctx context.Context) (bool, error) {
		list, err := e.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		marked := 0
		for _, c := range list.Items {
			if c.Annotations[annStorageProvisioner] == lab.DriverName {
				marked++
			}
		}
		return marked >= n, nil
	})
}

// deleteClaims deletes the n claims of ns and returns when each was
// deleted.
func (e *env) deleteClaims(ctx context.Context, ns string, n int) (map[string]time.Time, error) {
	deleted := make([]time.Time, n)
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		err := e.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim(i, "").Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		deleted[i] = time.Now()
		return nil
	})
	out := make(map[string]time.Time, n)
	for i, t := range deleted {
		out[claim(i, "").Name] = t
	}
	return out, err
}

// provisionerBinary returns the binary of a contender.
func (e *env) provisionerBinary(contender string) string {
	if contender == theirs {
		return e.opts.Compare
	}
	return filepath.Join(e.lab.BinDir, "csi-provisioner")
}
