// Command csi-node-publisher publishes a node's CSINode entry for a CSI
// driver (node ID, topology keys, allocatable volume count), labels the node
// with its topology segment and keeps both current. See docs/node-publisher.md.
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
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
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
	showVersion  bool
	publisher    limits.PublisherConfig
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("csi-node-publisher", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	fs.StringVar(&c.csiAddress, "csi-address", "/run/csi/socket", "Address of the CSI driver's node socket.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.StringVar(&c.publisher.NodeName, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default: $NODE_NAME).")
	fs.Int64Var(&c.publisher.ReservedVolumes, "reserved-volumes", 0, "Volumes subtracted from the driver's max_volumes_per_node (e.g. for volumes not managed by Kubernetes).")
	fs.DurationVar(&c.publisher.ResyncPeriod, "resync-period", time.Minute, "Re-run NodeGetInfo and re-publish this often.")
	fs.BoolVar(&c.publisher.CleanupOnExit, "cleanup-on-exit", false, "Remove this driver's CSINode entry on SIGTERM.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /healthz and /metrics; empty disables it.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 5, "QPS of the API client.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 10, "Burst of the API client.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := logOpts.Apply(); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
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
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-node-publisher/"+version)
	if err != nil {
		return err
	}
	conn, err := connection.Connect(ctx, cfg.csiAddress, nil)
	if err != nil {
		return fmt.Errorf("connecting to the CSI driver at %q: %w", cfg.csiAddress, err)
	}
	defer conn.Close()

	reg := metrics.NewKubeRegistry()
	pub, err := limits.NewPublisher(cfg.publisher, client,
		struct {
			csi.IdentityClient
			csi.NodeClient
		}{csi.NewIdentityClient(conn), csi.NewNodeClient(conn)},
		limits.NewPublisherMetrics(reg))
	if err != nil {
		return err
	}
	if cfg.httpEndpoint != "" {
		srv := httpServer(ctx, cfg.httpEndpoint, pub, reg)
		defer srv.Close()
	}
	return pub.Run(ctx)
}

// httpServer serves /healthz (503 while the driver is unreachable or the
// last publish failed) and /metrics until ctx is done.
func httpServer(ctx context.Context, addr string, pub *limits.Publisher, reg metrics.KubeRegistry) *http.Server {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.HandlerFor(reg, metrics.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := pub.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving health and metrics", "address", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", addr)
		}
	}()
	return srv
}
