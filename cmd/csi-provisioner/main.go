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
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	fs.StringVar(&c.csiAddress, "csi-address", "/run/csi/socket", "Address of the CSI driver's controller socket.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 20, "QPS of the API client (Events have a budget of their own of the same size).")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 40, "Burst of the API client.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /metrics, /healthz and /readyz (200 only on the leader); empty disables it.")
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
	if err := logOpts.Apply(); err != nil {
		return c, err
	}
	if c.capacity.Namespace == "" {
		c.capacity.Namespace = "default"
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.kubeAPIQPS <= 0 || c.kubeAPIBurst <= 0 {
		return c, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	return c, nil
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
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, cfg config) error {
	mm := metrics.NewCSIMetricsManagerForSidecar("")
	conn, info, err := provisioner.ConnectDriver(ctx, cfg.csiAddress, mm, cfg.probeTimeout,
		connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		return err
	}
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner/"+version)
	if err != nil {
		return err
	}
	events, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-provisioner-events/"+version)
	if err != nil {
		return err
	}
	election, err := kubeclient.New(restCfg, 5, 10, "csi-provisioner-leader-election/"+version)
	if err != nil {
		return err
	}
	cc := cfg.controller
	clients := provisioner.Clients{Work: client, Events: events, LeaderElection: election}
	if cfg.enableCapacity {
		if !info.SupportsCapacity {
			return fmt.Errorf("--enable-capacity: CSI driver %q lacks the GET_CAPACITY capability", info.Name)
		}
		if clients.Capacity, err = kubeclient.New(restCfg, cfg.capacityQPS, cfg.capacityBurst, "csi-provisioner-capacity/"+version); err != nil {
			return err
		}
		capCfg := cfg.capacity
		if cfg.capacityOwner != "" {
			dep, err := client.AppsV1().Deployments(capCfg.Namespace).Get(ctx, cfg.capacityOwner, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading the owner Deployment of capacity objects: %w", err)
			}
			capCfg.Owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
		}
		cc.Capacity = &capCfg
	}
	cc.Metrics = mm.GetRegistry()
	cc.Provisioner.DriverName = info.Name
	cc.Provisioner.SupportsTopology = info.SupportsTopology
	cc.Provisioner.SupportsSingleNodeMultiWriter = info.SupportsSingleNodeMultiWriter
	ctrl, err := provisioner.NewController(ctx, cc, clients, csi.NewControllerClient(conn))
	if err != nil {
		return err
	}
	if cfg.httpEndpoint != "" {
		srv := httpServer(ctx, cfg.httpEndpoint, mm, conn, ctrl.Leading)
		defer srv.Close()
	}
	return ctrl.Run(ctx)
}

// httpServer serves /metrics (CSI calls, operations, reschedules, capacity),
// /healthz (the driver answers Probe) and /readyz (200 only while this
// replica provisions, i.e. leads) until ctx is done.
func httpServer(ctx context.Context, addr string, mm metrics.CSIMetricsManager, conn *grpc.ClientConn, leading func() bool) *http.Server {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mm.RegisterToServer(mux, "/metrics")
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		ready, err := rpc.Probe(pctx, conn)
		if err != nil || !ready {
			http.Error(w, fmt.Sprintf("CSI driver not ready: %v", err), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !leading() {
			http.Error(w, "not leading: a standby replica does not provision", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving metrics and health", "address", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", addr)
		}
	}()
	return srv
}
