// Command csi-node-router labels the claims and PVs of a node-local CSI
// driver with their node (csi-topology-provisioner.io/node), so that the
// driver's csi-provisioner instances with --node-deployment-selection=label
// list and watch only their own node's. It labels what no instance does:
// claims the scheduler placed on a node, the pool of unselected
// immediate-binding claims, and the claims and PVs made before the label
// existed. One replica labels at a time (leader election). See
// docs/node-deployment.md, "Selection by label".
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
	"syscall"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/httpendpoint"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/noderouter"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

const terminationLog = "/dev/termination-log"

type config struct {
	driver       string
	kubeconfig   string
	kubeAPIQPS   float64
	kubeAPIBurst int
	httpEndpoint string
	workers      int
	showVersion  bool
	election     election
}

// parseArgs parses the command line into a config, without side effects.
func parseArgs(args []string) (config, *logging.Options, error) {
	var c config
	fs := flag.NewFlagSet("csi-node-router", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	fs.StringVar(&c.driver, "driver-name", "", "Name of the CSI driver whose claims and PVs are labelled (required).")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 20, "QPS of the API client (label PATCHes).")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 50, "Burst of the API client.")
	fs.IntVar(&c.workers, "worker-threads", 4, "Claims and PVs labelled at once.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /metrics, /healthz and /readyz; empty disables it.")
	fs.BoolVar(&c.election.enabled, "leader-election", false, "Label only while holding a Lease, so that one replica of several does.")
	fs.StringVar(&c.election.namespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's).")
	fs.DurationVar(&c.election.leaseDuration, "leader-election-lease-duration", 15*time.Second, "Duration of the leader-election Lease.")
	fs.DurationVar(&c.election.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "The leader gives up its work when it could not renew the Lease for this long.")
	fs.DurationVar(&c.election.retryPeriod, "leader-election-retry-period", 5*time.Second, "Time between two attempts to take or renew the Lease.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	if fs.NArg() > 0 {
		return c, nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.showVersion {
		return c, logOpts, nil
	}
	switch {
	case c.driver == "":
		return c, nil, errors.New("--driver-name is required")
	case c.kubeAPIQPS <= 0 || c.kubeAPIBurst <= 0:
		return c, nil, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	case c.workers <= 0:
		return c, nil, errors.New("--worker-threads must be positive")
	case c.election.enabled && (c.election.renewDeadline >= c.election.leaseDuration || c.election.retryPeriod <= 0):
		return c, nil, errors.New("--leader-election-renew-deadline must be below --leader-election-lease-duration, and --leader-election-retry-period positive")
	}
	return c, logOpts, nil
}

func main() {
	cfg, logOpts, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err == nil {
		err = logOpts.Apply()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if cfg.showVersion {
		fmt.Println("csi-node-router", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	logger := klog.FromContext(ctx)
	logger.Info("Starting csi-node-router", "version", version, "driver", cfg.driver)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		logger.Error(err, "csi-node-router failed")
		_ = os.WriteFile(terminationLog, []byte(err.Error()), 0o644)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, cfg config) error {
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	agent := "csi-node-router/" + version
	client, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, agent)
	if err != nil {
		return err
	}
	meta, err := kubeclient.NewMetadata(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, agent)
	if err != nil {
		return err
	}
	// Leader election has its own client: a burst of PATCHes must not
	// delay the Lease's renewal.
	electionClient, err := kubeclient.New(restCfg, 5, 10, agent+"/leader-election")
	if err != nil {
		return err
	}
	reg := metrics.NewKubeRegistry()
	r, err := noderouter.New(ctx, noderouter.Config{Driver: cfg.driver, Workers: cfg.workers, Metrics: reg}, client, meta)
	if err != nil {
		return err
	}
	if cfg.httpEndpoint != "" {
		lis, err := net.Listen("tcp", cfg.httpEndpoint)
		if err != nil {
			return fmt.Errorf("listening on --http-endpoint: %w", err)
		}
		srv := httpendpoint.Serve(ctx, lis, httpHandler(r.Synced, reg))
		defer srv.Close()
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	defer r.Shutdown()
	if !cfg.election.enabled {
		r.Run(ctx)
		return nil
	}
	return cfg.election.run(ctx, electionClient, cfg.driver, r.Run)
}

// httpHandler serves /metrics of reg, /healthz (200 while the process
// runs) and /readyz (200 once the caches have synced, on the leader and on
// standbys alike).
func httpHandler(synced func() bool, reg metrics.KubeRegistry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.HandlerFor(reg, metrics.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced() {
			http.Error(w, "informer caches have not synced yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
