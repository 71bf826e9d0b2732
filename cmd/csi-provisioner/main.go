// Command csi-provisioner is a topology-aware external provisioner sidecar for
// CSI drivers. See the project README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/owner"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/profiling"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if cfg.enablePprof && cfg.httpAddress() == "" {
		klog.Background().Info("--enable-pprof has no effect without --http-endpoint")
	}
	if cfg.showVersion {
		fmt.Println("csi-provisioner", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	logger := klog.FromContext(ctx)
	if cfg.removeRecords {
		err = removeInFlightRecords(ctx, cfg, os.Stdout)
		stop()
		if err != nil {
			logger.Error(err, "Removing in-flight records")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		klog.Flush()
		return
	}
	logger.Info("Starting csi-provisioner", "version", version)
	tuneNodeGC(logger, cfg.nodeDeployment, os.Getenv)
	if cfg.releasePages {
		releasePages(logger, "start")
	}
	err = run(ctx, cfg)
	stop()
	if err != nil {
		logger.Error(err, "csi-provisioner failed")
		writeTerminationMessage(err)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// terminationLog is where Kubernetes reads a container's termination
// message (kubectl describe pod: Last State, Message).
const terminationLog = "/dev/termination-log"

// writeTerminationMessage writes err to the termination log when the
// kubelet provides one (the file exists); it never creates the file.
func writeTerminationMessage(err error) {
	f, ferr := os.OpenFile(terminationLog, os.O_WRONLY|os.O_TRUNC, 0)
	if ferr != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(err.Error())
}

// run validates the kubeconfig, waits for the driver and provisions until
// ctx is done. It returns an error wrapping driverconn.ErrDriverChanged
// when the driver comes back from an outage with another name or without a
// capability this process relies on.
func run(ctx context.Context, cfg config) error {
	// The kubeconfig first: a bad one is reported at once, not after the
	// driver answered.
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	clients, err := newClients(cfg, restCfg)
	if err != nil {
		return err
	}
	mm := newMetricsManager()
	// HTTP first: /livez answers while the process waits for its driver.
	h := &health{address: cfg.csiAddress}
	if addr := cfg.httpAddress(); addr != "" {
		srv := httpServer(ctx, cfg, mm, h)
		defer srv.Close()
	}
	// No OnConnectionLoss: csi-lib-utils reconnects by default, and the
	// The driverconn.Monitor below reports the outage and checks the driver when it
	// is back.
	conn, info, err := driverconn.Connect(ctx, cfg.csiAddress, mm, cfg.probeTimeout)
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the driver
		}
		return err
	}
	cc := cfg.controller
	if cfg.nodeDeployment {
		if cc.Provisioner.Node, err = nodeDeployment(ctx, cfg, conn); err != nil {
			return err
		}
	}
	if cfg.enableCapacity {
		if cc.Capacity, err = capacityConfig(ctx, cfg, info, clients.Work, restCfg); err != nil {
			return err
		}
	}
	cc.DisableInFlightRecord = !cfg.inFlightRecord
	if cc.DisableInFlightRecord {
		klog.FromContext(ctx).Info("WARNING: --in-flight-record=false: volumes created before a crash, or in a provision/delete race, can leak")
	}
	cc.Metrics = mm.GetRegistry()
	cc.Provisioner.DriverName = info.Name
	cc.Provisioner.SupportsTopology = info.SupportsTopology
	cc.Provisioner.SupportsSingleNodeMultiWriter = info.SupportsSingleNodeMultiWriter
	cc.Provisioner.SupportsClone, cc.Provisioner.SupportsSnapshot = info.SupportsClone, info.SupportsSnapshot
	cc.Provisioner.SupportsModify = info.SupportsModify
	cc.Provisioner.SupportsAttach = info.SupportsAttach
	cc.Provisioner.IgnoreAttributesClasses = !cfg.featureGates.enabled("VolumeAttributesClass")
	if cc.Sources, err = sourcesConfig(cfg, info, restCfg, cfg.nodeDeployment); err != nil {
		return err
	}
	var ctrl *provisioner.Controller
	monitor := driverconn.NewMonitor(conn, driverconn.MonitorConfig{
		Address: cfg.csiAddress, Driver: info, UsesCapacity: cfg.enableCapacity,
		CallTimeout: cc.Provisioner.Timeout, OnReconnect: func(ctx context.Context) { ctrl.RetryNow(ctx) }, Metrics: mm.GetRegistry(),
	})
	cc.DriverStatus = monitor.Status
	if ctrl, err = provisioner.NewController(ctx, cc, clients, csi.NewControllerClient(conn)); err != nil {
		return err
	}
	h.connected(healthSources{driver: monitor.Status, probe: probeFunc(conn), leading: ctrl.Leading})
	if cfg.releasePages {
		go releaseWhenLeading(ctx, ctrl.Leading, func() { releasePages(klog.FromContext(ctx), "synced") })
	}
	return runUntilFirstError(ctx, ctrl.Run, monitor.Run)
}

// bindingWrites is the number of writes bind-through makes per claim (PV
// status, claim, claim status): its client's rate limit is that many times
// --kube-api-qps and --kube-api-burst.
const bindingWrites = 3

// newClients builds the API clients, each with its own rate limit.
func newClients(cfg config, restCfg *rest.Config) (provisioner.Clients, error) {
	var (
		c   provisioner.Clients
		err error
	)
	if c.Work, err = kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner/"+version); err != nil {
		return c, err
	}
	// Nodes are watched as metadata only (their labels), within the work's
	// rate budget: the watch is one request.
	if c.Metadata, err = kubeclient.NewMetadata(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner/"+version); err != nil {
		return c, err
	}
	if c.Events, err = kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner-events/"+version); err != nil {
		return c, err
	}
	if c.LeaderElection, err = kubeclient.New(restCfg, 5, 10, "csi-provisioner-leader-election/"+version); err != nil {
		return c, err
	}
	if cfg.controller.BindThrough {
		// Bind-through's three writes per claim get a budget of their own,
		// as Events do, so that they neither slow the PV creates nor wait
		// behind them; three times the work's, so that they keep pace with
		// one PV create per claim (docs/configuration.md, "Bind-through").
		if c.Binding, err = kubeclient.New(restCfg, bindingWrites*cfg.kubeAPIQPS, bindingWrites*cfg.kubeAPIBurst,
			"csi-provisioner-bind-through/"+version); err != nil {
			return c, err
		}
	}
	if cfg.enableCapacity {
		c.Capacity, err = kubeclient.New(restCfg, cfg.capacityQPS, cfg.capacityBurst, "csi-provisioner-capacity/"+version)
	}
	return c, err
}

// capacityConfig checks that the driver can report capacity and finds the
// owner of the capacity objects: the Deployment --capacity-owner-deployment
// names, or the object --capacity-ownerref-level levels up from the pod.
func capacityConfig(ctx context.Context, cfg config, info driverconn.DriverInfo, client kubernetes.Interface, restCfg *rest.Config) (*capacity.Config, error) {
	if !info.SupportsCapacity {
		return nil, fmt.Errorf("--enable-capacity: CSI driver %q lacks the GET_CAPACITY capability", info.Name)
	}
	capCfg := cfg.capacity
	// external-provisioner's managed-by value, so that either sidecar
	// takes over the other's objects; the objects of earlier releases of
	// ours are adopted too.
	nodeName := ""
	if cfg.nodeDeployment {
		nodeName = cfg.node.NodeName
	}
	capCfg.ManagedBy, capCfg.PreviousManagedBy = capacity.ManagedBy(nodeName), []string{capacity.LegacyManagedBy(nodeName)}
	if cfg.nodeDeployment && cfg.capacityOwner == "" && !cfg.capacityOwnerLevelSet {
		// A node's objects go with the node (the garbage collector
		// deletes them), not with the DaemonSet.
		node, err := client.CoreV1().Nodes().Get(ctx, cfg.node.NodeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the Node %q, owner of its capacity objects: %w", cfg.node.NodeName, err)
		}
		capCfg.Owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
		klog.FromContext(ctx).Info("Owner of capacity objects", "kind", "Node", "name", node.Name)
		return &capCfg, nil
	}
	if cfg.capacityOwner != "" {
		dep, err := client.AppsV1().Deployments(capCfg.Namespace).Get(ctx, cfg.capacityOwner, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the owner Deployment of capacity objects: %w", err)
		}
		capCfg.Owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
	}
	level, err := cfg.ownerLevel()
	if err != nil || level < 0 {
		return &capCfg, err
	}
	get, err := owner.NewMetadataGetter(restCfg)
	if err != nil {
		return nil, err
	}
	if capCfg.Owner, err = owner.Lookup(ctx, get, cfg.podNamespace, cfg.podName, level); err != nil {
		return nil, fmt.Errorf("--capacity-ownerref-level=%d: %w", level, err)
	}
	klog.FromContext(ctx).Info("Owner of capacity objects", "kind", capCfg.Owner.Kind, "name", capCfg.Owner.Name)
	return &capCfg, nil
}

// runUntilFirstError runs every function until ctx is done or one of them
// returns, which ends the others (their context is cancelled); the first
// one's error is returned once they all have returned.
func runUntilFirstError(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(func() {
			cancel(fn(ctx)) // nil: context.Canceled

		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// probeFunc probes the driver on conn once.
func probeFunc(conn *grpc.ClientConn) func(context.Context) error {
	return func(ctx context.Context) error {
		ready, err := rpc.Probe(ctx, conn)
		if err == nil && !ready {
			err = errors.New("the driver answers Probe but is not ready")
		}
		return err
	}
}

// httpServer serves newMux on --http-endpoint (or --metrics-address) until
// ctx is done.
func httpServer(ctx context.Context, cfg config, mm metrics.CSIMetricsManager, h *health) *http.Server {
	logger := klog.FromContext(ctx)
	addr := cfg.httpAddress()
	srv := &http.Server{Addr: addr, Handler: newMux(ctx, cfg, mm, h), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving metrics and health", "address", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", addr)
		}
	}()
	return srv
}

// newMux serves the metrics (CSI calls, operations, reschedules, capacity,
// driver connection, and upstream's: the provisioning library's, capacity
// objects, work queues, leader election, Go and process) on --metrics-path, the health endpoints of h and, with
// --enable-pprof, net/http/pprof under /debug/pprof/.
func newMux(ctx context.Context, cfg config, mm metrics.CSIMetricsManager, h *health) *http.ServeMux {
	mux := http.NewServeMux()
	mm.RegisterToServer(mux, cfg.metricsPath)
	h.register(mux)
	if cfg.enablePprof {
		klog.FromContext(ctx).Info("Serving profiling", "path", "/debug/pprof/")
		profiling.Register(mux)
	}
	return mux
}

// nodeDeployment completes --node-deployment's configuration with the
// node's topology as its driver reports it (NodeGetInfo): the driver must
// serve its node service on the same socket.
func nodeDeployment(ctx context.Context, cfg config, conn *grpc.ClientConn) (*nodedeploy.Config, error) {
	callCtx, cancel := context.WithTimeout(ctx, cfg.controller.Provisioner.Timeout)
	defer cancel()
	info, err := csi.NewNodeClient(conn).NodeGetInfo(callCtx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("--node-deployment: NodeGetInfo of the driver at %s (a node-local driver serves its node service on the same socket): %w", cfg.csiAddress, err)
	}
	nd := cfg.node
	nd.Topology = info.GetAccessibleTopology().GetSegments()
	klog.FromContext(ctx).Info("Node deployment", "node", nd.NodeName, "driverNodeID", info.GetNodeId(), "topology", nd.Topology,
		"immediateBinding", nd.ImmediateBinding, "baseDelay", nd.BaseDelay, "maxDelay", nd.MaxDelay)
	return &nd, nil
}
