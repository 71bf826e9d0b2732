// Command csi-node-publisher publishes a node's CSINode entry for a CSI
// driver (node ID, topology keys, allocatable volume count), labels the node
// with its topology segment and keeps both current, and renews the driver's
// heartbeat Lease on the node while the driver answers Probe. See
// docs/node-publisher.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/httpendpoint"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/profiling"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodepublisher"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

const terminationLog = "/dev/termination-log"

type config struct {
	csiAddress   string
	kubeconfig   string
	kubeAPIQPS   float64
	kubeAPIBurst int
	httpEndpoint string
	enablePprof  bool
	showVersion  bool
	publisher    nodepublisher.PublisherConfig
	// heartbeat is off when its LeaseDuration is 0.
	heartbeat heartbeat.Config
}

// parseFlags parses the command line and applies the logging flags.
func parseFlags(args []string) (config, error) {
	c, logOpts, err := parseArgs(args)
	if err != nil {
		return c, err
	}
	return c, logOpts.Apply()
}

// parseArgs parses the command line into a config, without side effects.
func parseArgs(args []string) (config, *logging.Options, error) {
	var c config
	fs := flag.NewFlagSet("csi-node-publisher", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	fs.StringVar(&c.csiAddress, "csi-address", "/run/csi/socket", "The CSI driver's node socket: an absolute path or unix:///absolute/path. Waited for until it accepts connections.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.StringVar(&c.publisher.NodeName, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default: $NODE_NAME).")
	fs.Int64Var(&c.publisher.ReservedVolumes, "reserved-volumes", 0, "Volumes subtracted from the driver's max_volumes_per_node (e.g. for volumes not managed by Kubernetes).")
	fs.DurationVar(&c.publisher.ResyncPeriod, "resync-period", time.Minute, "Re-run NodeGetInfo and re-publish this often.")
	fs.BoolVar(&c.publisher.CleanupOnExit, "cleanup-on-exit", false, "Remove this driver's CSINode entry on SIGTERM.")
	fs.DurationVar(&c.heartbeat.LeaseDuration, "lease-duration", heartbeat.DefaultLeaseDuration, "Duration of the driver's heartbeat Lease, renewed while the driver answers Probe: a driver silent this long counts as not live on this node (whole seconds; 0 disables the heartbeat).")
	fs.DurationVar(&c.heartbeat.RenewInterval, "lease-renew-interval", 0, "Renew the heartbeat Lease this often, one API write each (0: a third of --lease-duration).")
	fs.StringVar(&c.heartbeat.Namespace, "lease-namespace", os.Getenv("NAMESPACE"), "Namespace of the heartbeat Lease (default: $NAMESPACE, else the pod's service account namespace).")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /healthz and /metrics; empty disables it.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 5, "QPS of the API client.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 10, "Burst of the API client.")
	fs.BoolVar(&c.enablePprof, "enable-pprof", false, "Serve Go profiling (net/http/pprof) under /debug/pprof/ on --http-endpoint.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	if fs.NArg() > 0 {
		return c, nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.heartbeat.LeaseDuration < 0 {
		return c, nil, fmt.Errorf("--lease-duration %s must not be negative (0 disables the heartbeat)", c.heartbeat.LeaseDuration)
	}
	c.heartbeat.NodeName = c.publisher.NodeName
	return c, logOpts, nil
}

// leaseNamespace returns the heartbeat Lease's namespace: the flag's (or
// $NAMESPACE's) value, else the namespace in saFile, the pod's service
// account namespace.
func leaseNamespace(flagValue, saFile string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if ns := kubeclient.ServiceAccountNamespace(saFile); ns != "" {
		return ns, nil
	}
	return "", errors.New("the heartbeat Lease needs a namespace: set --lease-namespace or $NAMESPACE (outside a pod), or --lease-duration=0 to disable the heartbeat")
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
		fmt.Println("csi-node-publisher", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	logger := klog.FromContext(ctx)
	logger.Info("Starting csi-node-publisher", "version", version, "node", cfg.publisher.NodeName)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		logger.Error(err, "csi-node-publisher failed")
		// Kubernetes shows this file as the container's termination reason.
		_ = os.WriteFile(terminationLog, []byte(err.Error()), 0o644)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, cfg config) error {
	if cfg.heartbeat.LeaseDuration > 0 {
		var err error
		if cfg.heartbeat.Namespace, err = leaseNamespace(cfg.heartbeat.Namespace, kubeclient.ServiceAccountNamespaceFile); err != nil {
			return err
		}
		if err := cfg.heartbeat.Validate(); err != nil {
			return err
		}
	}
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-node-publisher/"+version)
	if err != nil {
		return err
	}
	reg := metrics.NewKubeRegistry()
	pubMetrics := nodepublisher.NewPublisherMetrics(reg)
	hbMetrics := heartbeat.NewMetrics(reg)
	// The endpoint listens before the driver is connected, so a busy
	// address fails at once and /metrics answers while the driver starts.
	var health publisherHealth
	if cfg.httpEndpoint != "" {
		lis, err := net.Listen("tcp", cfg.httpEndpoint)
		if err != nil {
			return fmt.Errorf("listening on --http-endpoint: %w", err)
		}
		mux := httpHandler(health.check, reg)
		if cfg.enablePprof {
			profiling.Register(mux)
		}
		srv := httpendpoint.Serve(ctx, lis, mux)
		defer srv.Close()
	}
	// Waiting first says why the socket cannot be dialled yet (missing,
	// nobody listening, not writable by this process's user).
	path, err := driverconn.WaitForSocket(ctx, cfg.csiAddress)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the driver
		}
		return err
	}
	conn, err := connection.Connect(ctx, "unix://"+path, nil)
	if err != nil {
		return fmt.Errorf("connecting to the CSI driver at %q: %w", cfg.csiAddress, err)
	}
	defer conn.Close()
	klog.FromContext(ctx).Info("Connected to CSI driver", "path", path)

	driver := struct {
		csi.IdentityClient
		csi.NodeClient
	}{csi.NewIdentityClient(conn), csi.NewNodeClient(conn)}
	pub, err := nodepublisher.NewPublisher(cfg.publisher, client, driver, pubMetrics)
	if err != nil {
		return err
	}
	var hb *heartbeat.Heartbeat
	if cfg.heartbeat.LeaseDuration > 0 {
		if hb, err = heartbeat.New(cfg.heartbeat, client, driver, hbMetrics); err != nil {
			return err
		}
	}
	health.pub.Store(pub)
	return runAll(ctx, pub.Run, hb)
}

// runAll runs the publisher and, when there is one, the heartbeat until ctx
// ends or one of them fails; the other is then stopped and waited for.
func runAll(ctx context.Context, publish func(context.Context) error, hb *heartbeat.Heartbeat) error {
	if hb == nil {
		return publish(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- publish(ctx) }()
	go func() { errs <- hb.Run(ctx) }()
	first := <-errs
	cancel()
	if second := <-errs; first == nil {
		first = second
	}
	return first
}

// publisherHealth is the health of the publisher once it exists. Safe for
// concurrent use.
type publisherHealth struct {
	pub atomic.Pointer[nodepublisher.Publisher]
}

// check returns nil while the publisher runs, the driver answers and the
// last publish worked.
func (h *publisherHealth) check() error {
	pub := h.pub.Load()
	if pub == nil {
		return errors.New("not connected to the CSI driver yet")
	}
	return pub.Healthy()
}

// httpHandler serves /healthz (503 with the reason while healthy returns an
// error) and /metrics of reg.
func httpHandler(healthy func() error, reg metrics.KubeRegistry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.HandlerFor(reg, metrics.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
