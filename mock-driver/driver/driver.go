package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
)

// Driver is one mock driver instance. Create it with New and serve it with
// Run; all methods are safe for concurrent use.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg    Config
	store  *state.Store
	faults *faults.Injector

	mu sync.Mutex
	// capacity overrides the configured capacity per segment key.
	capacity map[string]int64
	// requests are the most recent CreateVolume requests (a ring).
	requests []CreateRecord
	// nodePublished holds this node's published target paths by volume.
	nodePublished map[string]map[string]bool

	ready     chan struct{}
	adminAddr string
}

// CreateRecord is one CreateVolume request as the admin endpoint reports it
// (secrets are never recorded).
type CreateRecord struct {
	Time       time.Time           `json:"time"`
	Name       string              `json:"name"`
	Requisite  []map[string]string `json:"requisite,omitempty"`
	Preferred  []map[string]string `json:"preferred,omitempty"`
	Parameters map[string]string   `json:"parameters,omitempty"`
	// Result is the volume ID, or the error.
	Result string `json:"result"`
}

const maxRecords = 1000

// New returns a driver for cfg; state is loaded from cfg.StateFile.
func New(cfg Config) (*Driver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	store, err := state.Open(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	inj, err := faults.NewInjector(normalizeRules(cfg.Faults), nil)
	if err != nil {
		return nil, err
	}
	return &Driver{
		cfg:           cfg,
		store:         store,
		faults:        inj,
		capacity:      map[string]int64{},
		nodePublished: map[string]map[string]bool{},
		ready:         make(chan struct{}),
	}, nil
}

func normalizeRules(rules []faults.Rule) []faults.Rule {
	out := make([]faults.Rule, 0, len(rules))
	for _, r := range rules {
		r.Segment = NormalizeSegment(r.Segment)
		out = append(out, r)
	}
	return out
}

// Ready is closed once the gRPC socket (and the admin endpoint) listen.
func (d *Driver) Ready() <-chan struct{} { return d.ready }

// AdminURL returns the admin endpoint's base URL once Ready, or "".
func (d *Driver) AdminURL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.adminAddr == "" {
		return ""
	}
	return "http://" + d.adminAddr
}

// Volumes returns a snapshot of the driver's volumes.
func (d *Driver) Volumes() []state.Volume { return d.store.List() }

// Faults returns the fault injector, to change rules in-process.
func (d *Driver) Faults() *faults.Injector { return d.faults }

// Run serves the driver until ctx is done, then stops gracefully.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	path := strings.TrimPrefix(d.cfg.Endpoint, "unix://")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %q: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %q: %w", path, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logInterceptor(logger)))
	csi.RegisterIdentityServer(srv, d)
	if d.cfg.Mode != ModeNode {
		csi.RegisterControllerServer(srv, d)
	}
	if d.cfg.Mode != ModeController {
		csi.RegisterNodeServer(srv, d)
	}

	var admin *http.Server
	if d.cfg.AdminAddress != "" {
		alis, err := net.Listen("tcp", d.cfg.AdminAddress)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listening on admin address %q: %w", d.cfg.AdminAddress, err)
		}
		d.mu.Lock()
		d.adminAddr = alis.Addr().String()
		d.mu.Unlock()
		admin = &http.Server{Handler: d.adminHandler(logger), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := admin.Serve(alis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Admin endpoint failed")
			}
		}()
	}
	logger.Info("Mock CSI driver serving", "name", d.cfg.Name, "mode", d.cfg.Mode, "endpoint", path,
		"admin", d.AdminURL(), "nodeID", d.cfg.NodeID, "topology", d.cfg.NodeTopology)
	close(d.ready)

	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
	case err := <-errCh:
		return fmt.Errorf("serving gRPC: %w", err)
	}
	if admin != nil {
		_ = admin.Close()
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	_ = os.Remove(path)
	return nil
}

// logInterceptor logs every call, secrets stripped, at V(4), with the
// driver's logger in the call's context.
func (d *Driver) logInterceptor(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx = klog.NewContext(ctx, logger)
		logger.V(4).Info("CSI request", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req))
		resp, err := handler(ctx, req)
		if err != nil {
			logger.V(4).Info("CSI error", "method", info.FullMethod, "err", err)
		} else {
			logger.V(4).Info("CSI response", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp))
		}
		return resp, err
	}
}

// GetPluginInfo implements csi.IdentityServer.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: d.cfg.Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	if d.cfg.Mode != ModeNode {
		caps = append(caps, service(csi.PluginCapability_Service_CONTROLLER_SERVICE))
	}
	if !d.cfg.DisableTopology {
		caps = append(caps, service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe implements csi.IdentityServer.
func (d *Driver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := d.faults.Check(ctx, "Probe", nil); err != nil {
		return nil, err
	}
	return &csi.ProbeResponse{}, nil
}
