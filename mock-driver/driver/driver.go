package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// stopTimeout bounds the graceful stop; then open calls are cut.
const stopTimeout = 5 * time.Second

// Driver is one mock driver instance. Create it with New and serve it with
// Run (once); all methods are safe for concurrent use. The CSI methods can
// also be called in-process, without fault injection and logging, which the
// gRPC server adds.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg    Config
	store  *state.Store
	faults *faults.Injector
	ready  chan struct{}
	ran    atomic.Bool
	// serving is true from Ready until Run starts to stop the gRPC server.
	serving atomic.Bool

	mu sync.Mutex
	// capacity overrides the configured capacity per segment key.
	capacity map[string]int64
	// requests are the most recent Controller service calls, oldest
	// first; seq numbers them.
	requests []CallRecord
	seq      int64
	// targets are this node's NodePublishVolume targets by volume ID.
	targets map[string]map[string]publication
	// adminAddr is the admin endpoint's address once it listens.
	adminAddr string
	// healthAddr is the health endpoint's address once it listens.
	healthAddr string
	// creating holds the names of the CreateVolume calls that run now.
	creating map[string]struct{}
}

// New returns a driver for cfg, with the volumes of cfg.StateFile.
func New(cfg Config) (*Driver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	store, err := state.Open(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	inj, err := faults.NewInjector(cfg.Faults, faults.Options{})
	if err != nil {
		return nil, err
	}
	return &Driver{
		cfg:      cfg,
		store:    store,
		faults:   inj,
		ready:    make(chan struct{}),
		capacity: map[string]int64{},
		targets:  map[string]map[string]publication{},
	}, nil
}

// Ready is closed once the gRPC socket and the admin and health endpoints
// listen.
func (d *Driver) Ready() <-chan struct{} { return d.ready }

// AdminURL returns the admin endpoint's base URL, "http://127.0.0.1:port",
// once Ready; "" without an admin endpoint.
func (d *Driver) AdminURL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.adminAddr == "" {
		return ""
	}
	return "http://" + d.adminAddr
}

// Volumes returns a snapshot of the driver's volumes in ID order.
func (d *Driver) Volumes() []state.Volume { return d.store.List() }

// Faults returns the fault injector, to change rules in-process.
func (d *Driver) Faults() *faults.Injector { return d.faults }

// SetFaults replaces the fault rules; keys without '/' get TopologyPrefix.
func (d *Driver) SetFaults(rules []faults.Rule) error {
	return d.faults.Set(normalizeRules(rules))
}

// Run listens on the endpoint (removing a stale socket file) and on the
// admin and health addresses, serves until ctx is done, then stops
// gracefully (open calls get stopTimeout to finish; the health endpoint
// answers 503 meanwhile), closes the HTTP endpoints and removes the socket.
// It returns an error when it cannot listen or serving fails; a Driver runs
// once.
func (d *Driver) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return errors.New("the mock driver is already running or ran before")
	}
	logger := klog.FromContext(ctx)
	path, _ := SocketPath(d.cfg.Endpoint) // validated by New
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %q: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %q: %w", path, err)
	}
	defer os.Remove(path)
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.interceptor(ctx, logger)))
	csi.RegisterIdentityServer(srv, d)
	if d.cfg.Mode != ModeNode {
		csi.RegisterControllerServer(srv, d)
	}
	if d.cfg.Mode != ModeController {
		csi.RegisterNodeServer(srv, d)
	}

	errCh := make(chan error, 3)
	if d.cfg.AdminAddress != "" {
		admin, err := d.serveAdmin(logger, errCh)
		if err != nil {
			lis.Close()
			return err
		}
		defer admin.Close()
	}
	if d.cfg.HealthAddress != "" {
		stopHealth, err := d.serveHealth(path, errCh)
		if err != nil {
			lis.Close()
			return err
		}
		defer stopHealth()
	}
	logger.Info("Mock CSI driver serving", "name", d.cfg.Name, "mode", d.cfg.Mode, "endpoint", path,
		"admin", d.AdminURL(), "health", d.HealthURL(), "nodeID", d.cfg.NodeID, "topology", d.cfg.NodeTopology,
		"segments", len(d.cfg.Segments))
	go func() {
		if err := srv.Serve(lis); err != nil {
			errCh <- fmt.Errorf("serving gRPC: %w", err)
		}
	}()
	d.serving.Store(true)
	close(d.ready)

	select {
	case <-ctx.Done():
		d.serving.Store(false)
	case err := <-errCh:
		d.serving.Store(false)
		srv.Stop()
		return err
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		logger.Info("Graceful stop timed out, closing open calls", "timeout", stopTimeout)
		srv.Stop()
	}
	logger.Info("Mock CSI driver stopped")
	return nil
}

// serveAdmin starts the admin endpoint; a serving error goes to errCh.
func (d *Driver) serveAdmin(logger klog.Logger, errCh chan<- error) (*http.Server, error) {
	alis, err := net.Listen("tcp", d.cfg.AdminAddress)
	if err != nil {
		return nil, fmt.Errorf("listening on admin address %q: %w", d.cfg.AdminAddress, err)
	}
	d.mu.Lock()
	d.adminAddr = alis.Addr().String()
	d.mu.Unlock()
	srv := &http.Server{
		Handler:           d.adminHandler(logger),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
	}
	go func() {
		if err := srv.Serve(alis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errCh <- fmt.Errorf("serving the admin endpoint: %w", err)
		}
	}()
	return srv, nil
}
