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
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

type config struct {
	csiAddress   string
	kubeconfig   string
	kubeAPIQPS   float64
	kubeAPIBurst int
	httpEndpoint string
	showVersion  bool
	controller   provisioner.ControllerConfig
	probeTimeout time.Duration

	enableCapacity bool
	capacity       provisioner.CapacityConfig
	capacityOwner  string
	capacityQPS    float64
	capacityBurst  int
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("csi-provisioner", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	p := &c.controller.Provisioner
	fs.StringVar(&c.csiAddress, "csi-address", "/run/csi/socket", "The CSI driver's controller socket: an absolute path or unix:///absolute/path. Waited for until it accepts connections.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 20, "QPS of the API client (Events have a budget of their own of the same size).")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 40, "Burst of the API client.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /metrics, /livez (the process runs), /healthz (the driver is connected and ready) and /readyz (the driver is connected and this replica leads); empty disables it.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	fs.DurationVar(&p.Timeout, "timeout", 10*time.Second, "Timeout of each CSI call.")
	fs.DurationVar(&c.probeTimeout, "probe-timeout", time.Second, "Timeout of one driver Probe at start-up.")
	fs.IntVar(&c.controller.WorkerThreads, "worker-threads", 100, "Claims and volumes processed at once.")
	fs.DurationVar(&c.controller.RetryIntervalStart, "retry-interval-start", time.Second, "First retry interval of a failed provision or delete; doubles on each failure.")
	fs.DurationVar(&c.controller.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Largest retry interval of a failed provision or delete.")
	fs.BoolVar(&p.StrictTopology, "strict-topology", false, "Delayed binding: requisite and preferred topology are exactly the selected node's segment.")
	fs.BoolVar(&p.ImmediateTopology, "immediate-topology", true, "Immediate binding without allowedTopologies: send all known segments as requisite topology.")
	fs.BoolVar(&p.ExtraCreateMetadata, "extra-create-metadata", false, "Add PVC name/namespace and PV name to CreateVolume parameters.")
	fs.StringVar(&p.DefaultFSType, "default-fstype", "", "Filesystem type when the class sets none.")
	fs.StringVar(&p.VolumeNamePrefix, "volume-name-prefix", "pvc", "Prefix of CSI volume names.")
	fs.IntVar(&p.VolumeNameUUIDLength, "volume-name-uuid-length", -1, "Truncate the PVC UID in volume names to this length; -1 keeps it whole.")
	fs.BoolVar(&c.controller.LeaderElection, "leader-election", false, "Provision only while holding a leader-election Lease.")
	fs.StringVar(&c.controller.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's namespace).")
	fs.DurationVar(&c.controller.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "Leader-election lease duration.")
	fs.DurationVar(&c.controller.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "Leader-election renew deadline.")
	fs.DurationVar(&c.controller.RetryPeriod, "leader-election-retry-period", 5*time.Second, "Leader-election retry period.")
	fs.BoolVar(&c.enableCapacity, "enable-capacity", false, "Publish CSIStorageCapacity objects per (segment, delayed-binding class of the driver).")
	fs.DurationVar(&c.capacity.PollInterval, "capacity-poll-interval", time.Minute, "Refresh every capacity object this often (touched segments at once).")
	fs.StringVar(&c.capacity.Namespace, "capacity-namespace", os.Getenv("NAMESPACE"), "Namespace of the CSIStorageCapacity objects (default: $NAMESPACE, else \"default\").")
	fs.StringVar(&c.capacityOwner, "capacity-owner-deployment", "", "Deployment (in --capacity-namespace) that owns the capacity objects; empty: no owner.")
	fs.Float64Var(&c.capacityQPS, "capacity-qps", 5, "QPS of the capacity publisher's own API client.")
	fs.IntVar(&c.capacityBurst, "capacity-burst", 10, "Burst of the capacity publisher's own API client.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.capacity.Namespace == "" {
		c.capacity.Namespace = "default"
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, logOpts.Apply()
}

// validate checks what parseFlags can check without I/O.
func (c config) validate() error {
	if _, err := provisioner.SocketPath(c.csiAddress); err != nil {
		return fmt.Errorf("--csi-address: %w", err)
	}
	if c.kubeAPIQPS <= 0 || c.kubeAPIBurst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	return nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if cfg.showVersion {
		fmt.Println("csi-provisioner", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	logger := klog.FromContext(ctx)
	logger.Info("Starting csi-provisioner", "version", version)
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
// ctx is done. It returns an error wrapping provisioner.ErrDriverChanged
// when the driver comes back from an outage with another name or without a
// capability this process relies on.
func run(ctx context.Context, cfg config) error {
	// The kubeconfig first: a bad one is reported at once, not after the
	// driver answered.
	clients, err := newClients(cfg)
	if err != nil {
		return err
	}
	mm := metrics.NewCSIMetricsManagerForSidecar("")
	// HTTP first: /livez answers while the process waits for its driver.
	h := &health{address: cfg.csiAddress}
	if cfg.httpEndpoint != "" {
		srv := httpServer(ctx, cfg.httpEndpoint, mm, h)
		defer srv.Close()
	}
	// No OnConnectionLoss: csi-lib-utils reconnects by default, and the
	// DriverMonitor below reports the outage and checks the driver when it
	// is back.
	conn, info, err := provisioner.ConnectDriver(ctx, cfg.csiAddress, mm, cfg.probeTimeout)
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
	if cfg.enableCapacity {
		if cc.Capacity, err = capacityConfig(ctx, cfg, info, clients.Work); err != nil {
			return err
		}
	}
	cc.Metrics = mm.GetRegistry()
	cc.Provisioner.DriverName = info.Name
	cc.Provisioner.SupportsTopology = info.SupportsTopology
	cc.Provisioner.SupportsSingleNodeMultiWriter = info.SupportsSingleNodeMultiWriter
	ctrl, err := provisioner.NewController(ctx, cc, clients, csi.NewControllerClient(conn))
	if err != nil {
		return err
	}
	monitor := provisioner.NewDriverMonitor(conn, provisioner.DriverMonitorConfig{
		Address: cfg.csiAddress, Driver: info, UsesCapacity: cfg.enableCapacity,
		CallTimeout: cc.Provisioner.Timeout, OnReconnect: ctrl.RetryNow, Metrics: mm.GetRegistry(),
	})
	h.connected(healthSources{driver: monitor.Status, probe: probeFunc(conn), leading: ctrl.Leading})
	return runUntilFirstError(ctx, ctrl.Run, monitor.Run)
}

// newClients loads the kubeconfig (or the in-cluster configuration) and
// builds the API clients, each with its own rate limit.
func newClients(cfg config) (provisioner.Clients, error) {
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return provisioner.Clients{}, err
	}
	var c provisioner.Clients
	if c.Work, err = kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner/"+version); err != nil {
		return c, err
	}
	if c.Events, err = kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner-events/"+version); err != nil {
		return c, err
	}
	if c.LeaderElection, err = kubeclient.New(restCfg, 5, 10, "csi-provisioner-leader-election/"+version); err != nil {
		return c, err
	}
	if cfg.enableCapacity {
		c.Capacity, err = kubeclient.New(restCfg, cfg.capacityQPS, cfg.capacityBurst, "csi-provisioner-capacity/"+version)
	}
	return c, err
}

// capacityConfig checks that the driver can report capacity and reads the
// owner Deployment of the capacity objects.
func capacityConfig(ctx context.Context, cfg config, info provisioner.DriverInfo, client kubernetes.Interface) (*provisioner.CapacityConfig, error) {
	if !info.SupportsCapacity {
		return nil, fmt.Errorf("--enable-capacity: CSI driver %q lacks the GET_CAPACITY capability", info.Name)
	}
	capCfg := cfg.capacity
	if cfg.capacityOwner != "" {
		dep, err := client.AppsV1().Deployments(capCfg.Namespace).Get(ctx, cfg.capacityOwner, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the owner Deployment of capacity objects: %w", err)
		}
		capCfg.Owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
	}
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

// httpServer serves /metrics (CSI calls, operations, reschedules, capacity,
// driver connection) and the health endpoints of h until ctx is done.
func httpServer(ctx context.Context, addr string, mm metrics.CSIMetricsManager, h *health) *http.Server {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mm.RegisterToServer(mux, "/metrics")
	h.register(mux)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving metrics and health", "address", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", addr)
		}
	}()
	return srv
}
