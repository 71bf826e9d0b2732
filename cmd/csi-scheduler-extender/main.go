// Command csi-scheduler-extender serves the companion scheduler filter for
// one CSI driver as an HTTP(S) kube-scheduler extender. See
// deploy/kubernetes/components/scheduler-extender/kube-scheduler-config.yaml for the scheduler side.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/profiling"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler/extender"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

type config struct {
	driver       string
	kubeconfig   string
	listen       string
	httpEndpoint string
	enablePprof  bool
	tlsCert      string
	tlsKey       string
	clientCA     string
	kubeAPIQPS   float64
	kubeAPIBurst int
	ttl          time.Duration
	weights      scheduler.ScoreWeights
	heartbeat    bool
	heartbeatNS  string
	showVersion  bool
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("csi-scheduler-extender", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	fs.StringVar(&c.driver, "driver-name", "", "CSI driver (provisioner name) whose volumes are filtered. Required.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.StringVar(&c.listen, "listen", ":8888", "Address serving /filter, /prioritize, /healthz and /metrics.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving only /healthz and /metrics over plain HTTP, without client certificates, for kubelet probes and Prometheus when --client-ca-file guards --listen; empty disables it.")
	fs.StringVar(&c.tlsCert, "tls-cert-file", "", "Serve HTTPS with this certificate.")
	fs.StringVar(&c.tlsKey, "tls-private-key-file", "", "Key of --tls-cert-file.")
	fs.StringVar(&c.clientCA, "client-ca-file", "", "Require client certificates signed by this CA (HTTPS only).")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 20, "QPS of the API client.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 40, "Burst of the API client.")
	fs.DurationVar(&c.ttl, "reservation-ttl", 5*time.Minute, "How long an observed selected-node reservation lives without its claim being bound.")
	fs.Int64Var(&c.weights.FreeCapacity, "free-capacity-weight", scheduler.DefaultScoreWeights().FreeCapacity,
		"Weight of the free capacity left in the node's segment in the node score.")
	fs.Int64Var(&c.weights.VolumeHeadroom, "volume-headroom-weight", scheduler.DefaultScoreWeights().VolumeHeadroom,
		"Weight of the attach slots left on the node in the node score.")
	fs.BoolVar(&c.heartbeat, "driver-heartbeat", true, "Filter out, for pods with pending WaitForFirstConsumer claims of the driver, nodes whose driver heartbeat Lease (renewed by csi-node-publisher while the driver answers Probe) has expired. Nodes without such a Lease are never filtered out for it.")
	fs.StringVar(&c.heartbeatNS, "heartbeat-namespace", kubeclient.PodNamespace(kubeclient.ServiceAccountNamespaceFile),
		"Namespace of the driver heartbeat Leases (csi-node-publisher's --lease-namespace). Default: $NAMESPACE, else the extender's own pod namespace, as the shipped RBAC grants; empty (outside a pod, or set so) means all namespaces, which needs list and watch on Leases cluster-wide. While the Leases may not be listed, every node counts as live, and the extender says so once in its log.")
	fs.BoolVar(&c.enablePprof, "enable-pprof", false, "Serve Go profiling (net/http/pprof) under /debug/pprof/ on --http-endpoint (never on --listen).")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := logOpts.Apply(); err != nil {
		return c, err
	}
	if c.showVersion {
		return c, nil
	}
	if c.driver == "" {
		return c, errors.New("--driver-name is required")
	}
	if err := c.weights.Validate(); err != nil {
		return c, fmt.Errorf("--free-capacity-weight and --volume-headroom-weight: %w", err)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") || (c.clientCA != "" && c.tlsCert == "") {
		return c, errors.New("--tls-cert-file and --tls-private-key-file go together, and --client-ca-file needs them")
	}
	if c.httpEndpoint != "" && c.httpEndpoint == c.listen {
		return c, errors.New("--http-endpoint must differ from --listen")
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
		fmt.Println("csi-scheduler-extender", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		klog.FromContext(ctx).Error(err, "csi-scheduler-extender failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// extenderMetrics counts and times answered requests by verb and HTTP code,
// and counts rejected nodes by reason.
type extenderMetrics struct {
	requests  *metrics.CounterVec
	durations *metrics.HistogramVec
	rejected  *metrics.CounterVec
}

func newExtenderMetrics(reg metrics.KubeRegistry) extenderMetrics {
	m := extenderMetrics{
		requests: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_scheduler_extender", Name: "requests_total",
			Help: "Extender requests by verb and HTTP code."}, []string{"verb", "code"}),
		durations: metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: "csi_scheduler_extender", Name: "request_duration_seconds",
			Help: "Time to answer a request, by verb.", Buckets: metrics.ExponentialBuckets(0.0001, 4, 10)}, []string{"verb"}),
		rejected: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_scheduler_extender", Name: "rejected_nodes_total",
			Help: "Nodes the filter rejected, by reason."}, []string{"reason"}),
	}
	reg.MustRegister(m.requests, m.durations, m.rejected)
	return m
}

func (m extenderMetrics) Observe(verb string, code int, d time.Duration) {
	m.requests.WithLabelValues(verb, strconv.Itoa(code)).Inc()
	m.durations.WithLabelValues(verb).Observe(d.Seconds())
}

func (m extenderMetrics) Rejected(reason scheduler.Reason) {
	m.rejected.WithLabelValues(string(reason)).Inc()
}

func run(ctx context.Context, cfg config) error {
	logger := klog.FromContext(ctx)
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubeclient.New(restCfg, cfg.kubeAPIQPS, cfg.kubeAPIBurst, "csi-scheduler-extender/"+version)
	if err != nil {
		return err
	}
	// Cached objects are trimmed to what the filter reads (trimForCache).
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTransform(trimForCache))
	core, stopOptional, err := newCore(ctx, cfg, client, restCfg, factory)
	if err != nil {
		return err
	}
	defer stopOptional()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}

	reg := metrics.NewKubeRegistry()
	mux := http.NewServeMux()
	extender.New(core, factory.Core().V1().Nodes().Lister(), logger, newExtenderMetrics(reg)).Register(mux)
	registerHealthAndMetrics(mux, reg)
	srv := &http.Server{Addr: cfg.listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if cfg.clientCA != "" {
		pem, err := os.ReadFile(cfg.clientCA)
		if err != nil {
			return fmt.Errorf("reading --client-ca-file: %w", err)
		}
		if srv.TLSConfig, err = extender.ClientCertTLSConfig(pem); err != nil {
			return fmt.Errorf("--client-ca-file %s: %w", cfg.clientCA, err)
		}
	}
	return serve(ctx, cfg, srv, reg)
}

// newCore builds the filter's core on factory's informers (the ledger
// follows the selected-node annotations the scheduler writes) and starts
// following its optional APIs: VolumeSnapshots and, with --driver-heartbeat,
// the heartbeat Leases, each picked up whenever it appears (CRDs installed
// later, a Role granted later); the extender serves without them meanwhile.
// stop shuts the heartbeat informers down.
func newCore(ctx context.Context, cfg config, client kubernetes.Interface, restCfg *rest.Config,
	factory informers.SharedInformerFactory) (core *scheduler.Core, stop func(), err error) {
	snapClient, err := snapclient.NewForConfig(rest.CopyConfig(restCfg))
	if err != nil {
		return nil, nil, err
	}
	snaps := scheduler.SnapshotInformer(snapClient)
	opt := scheduler.OptionalSources{Snapshots: snaps.Source}
	var hbFactory informers.SharedInformerFactory
	if cfg.heartbeat {
		// A factory of its own: only the heartbeat Leases, never all Leases.
		if hbFactory, _, opt.Liveness, err = scheduler.HeartbeatInformer(client, cfg.heartbeatNS); err != nil {
			return nil, nil, err
		}
	}
	core, err = scheduler.NewFromInformers(scheduler.Config{Driver: cfg.driver, ReservationTTL: cfg.ttl, ScoreWeights: cfg.weights},
		factory, opt)
	if err != nil {
		return nil, nil, err
	}
	go snaps.API.Run(ctx)
	stop = func() {}
	if hbFactory != nil {
		go scheduler.HeartbeatAPI(client, cfg.heartbeatNS, hbFactory).Run(ctx)
		stop = hbFactory.Shutdown
	}
	return core, stop, nil
}

// serve runs srv on --listen (TLS with --tls-cert-file) and, with
// --http-endpoint, plain health and metrics beside it, until ctx ends (a
// graceful shutdown of both, 10 s at most) or one of them fails.
func serve(ctx context.Context, cfg config, srv *http.Server, reg metrics.KubeRegistry) error {
	logger := klog.FromContext(ctx)
	errCh := make(chan error, 2)
	go func() {
		logger.Info("Serving the scheduler extender", "address", cfg.listen, "driver", cfg.driver, "tls", cfg.tlsCert != "",
			"driverHeartbeat", cfg.heartbeat, "heartbeatNamespace", cfg.heartbeatNS)
		if cfg.tlsCert != "" {
			errCh <- srv.ListenAndServeTLS(cfg.tlsCert, cfg.tlsKey)
		} else {
			errCh <- srv.ListenAndServe()
		}
	}()
	servers := []*http.Server{srv}
	if cfg.httpEndpoint != "" {
		// Plain HTTP without client certificates: kubelet probes and
		// Prometheus cannot present one to --listen with --client-ca-file.
		plain := http.NewServeMux()
		registerHealthAndMetrics(plain, reg)
		if cfg.enablePprof {
			profiling.Register(plain)
		}
		hsrv := &http.Server{Addr: cfg.httpEndpoint, Handler: plain, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hsrv)
		go func() {
			logger.Info("Serving health and metrics", "address", cfg.httpEndpoint)
			errCh <- hsrv.ListenAndServe()
		}()
	}
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var errs []error
		for _, s := range servers {
			errs = append(errs, s.Shutdown(sctx))
		}
		return errors.Join(errs...)
	case err := <-errCh:
		for _, s := range servers {
			s.Close()
		}
		return err
	}
}

// registerHealthAndMetrics adds /healthz (200 once the informers have
// synced, which run waits for before serving) and /metrics of reg to mux.
func registerHealthAndMetrics(mux *http.ServeMux, reg metrics.KubeRegistry) {
	mux.Handle("/metrics", metrics.HandlerFor(reg, metrics.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
}
