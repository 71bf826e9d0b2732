package driverconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ErrDriverChanged is returned by Monitor.Run when the driver came
// back with another name or without a capability this process relies on:
// what the process derived from them at start-up is stale, and only a
// restart reads them afresh.
var ErrDriverChanged = errors.New("the CSI driver came back changed")

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Address of the driver's socket, for messages.
	Address string
	// Driver is what the driver reported at start-up.
	Driver DriverInfo
	// UsesCapacity: this process publishes capacity (GetCapacity), so the
	// driver must keep GET_CAPACITY.
	UsesCapacity bool
	// Interval between two reconnection attempts. Default 1s.
	Interval time.Duration
	// CallTimeout bounds each call of a reconnection attempt. Default 10s.
	CallTimeout time.Duration
	// LogInterval: while the driver stays away, that is logged again this
	// often, with for how long. Default 30s.
	LogInterval time.Duration
	// OnReconnect, when set, is called each time the driver is back
	// unchanged (provisioner.Controller.RetryNow: retry what failed meanwhile at once).
	OnReconnect func(context.Context)
	// Metrics, when set, receives the driver_connected gauge and the
	// driver_connection_losses_total counter.
	Metrics metrics.KubeRegistry
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

func (c MonitorConfig) withDefaults() MonitorConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.LogInterval <= 0 {
		c.LogInterval = 30 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c
}

// Monitor watches the connection to the CSI driver. When it drops,
// the monitor says so once, reconnects (CSI calls fail with UNAVAILABLE
// meanwhile, and their claims are retried), says periodically for how long
// the driver has been away, and once the driver answers again re-reads its
// name and capabilities: unchanged, the driver is connected again;
// changed, Run returns ErrDriverChanged. Status may be called concurrently
// with Run; Run is called once.
type Monitor struct {
	cfg     MonitorConfig
	conn    *grpc.ClientConn
	metrics *driverMetrics

	mu        sync.Mutex
	connected bool
	since     time.Time // when the connection was lost
	lastErr   error     // of the last reconnection attempt
}

// NewMonitor returns a monitor of conn, a connection made by
// Connect, which starts connected.
func NewMonitor(conn *grpc.ClientConn, cfg MonitorConfig) *Monitor {
	cfg = cfg.withDefaults()
	m := &Monitor{cfg: cfg, conn: conn, connected: true}
	if cfg.Metrics != nil {
		m.metrics = newDriverMetrics(cfg.Metrics)
	}
	m.metrics.setConnected(true)
	return m
}

// Status reports whether the driver is connected; when it is not, reason
// says since when and why, for /readyz and /healthz.
func (m *Monitor) Status() (connected bool, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.connected {
		return true, ""
	}
	reason = fmt.Sprintf("no connection to CSI driver %q at %s for %s; reconnecting", m.cfg.Driver.Name, m.cfg.Address,
		m.cfg.Clock.Since(m.since).Round(time.Second))
	if m.lastErr != nil {
		reason += fmt.Sprintf(" (last attempt: %v)", m.lastErr)
	}
	return false, reason
}

func (m *Monitor) setConnected(connected bool, lastErr error) {
	m.mu.Lock()
	if m.connected && !connected {
		m.since = m.cfg.Clock.Now()
	}
	m.connected, m.lastErr = connected, lastErr
	m.mu.Unlock()
	m.metrics.setConnected(connected)
}

// Run watches the connection until ctx is done (nil) or the driver came
// back changed (an error wrapping ErrDriverChanged) or unusable (an error
// saying it cannot provision volumes).
func (m *Monitor) Run(ctx context.Context) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "address", m.cfg.Address, "driver", m.cfg.Driver.Name)
	ctx = klog.NewContext(ctx, logger)
	for {
		if !m.waitLost(ctx) {
			return nil
		}
		m.setConnected(false, nil)
		m.metrics.lost()
		logger.Error(nil, "Lost connection to the CSI driver; reconnecting. Until it is back, provisioning and deleting fail and are retried, and /readyz and /healthz answer 503")
		info, err := m.reconnect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the CSI driver at %s came back unusable; exiting: %w", m.cfg.Address, err)
		}
		if change := driverChange(m.cfg.Driver, info, m.cfg.UsesCapacity); change != "" {
			return fmt.Errorf("%w at %s: %s; exiting so that a restart uses the driver as it is now", ErrDriverChanged, m.cfg.Address, change)
		}
		downtime := m.downtime()
		m.setConnected(true, nil)
		logger.Info("Reconnected to the CSI driver; retrying what failed meanwhile", "downtime", downtime)
		if m.cfg.OnReconnect != nil {
			m.cfg.OnReconnect(ctx)
		}
	}
}

// downtime is how long ago the connection was lost.
func (m *Monitor) downtime() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Clock.Since(m.since).Round(time.Millisecond)
}

// waitLost blocks while the connection is ready; it returns false when ctx
// is done first. Any state but READY after the connection was ready means
// the transport to the driver closed: the channel never idles (csi-lib-utils
// disables the idle timeout).
func (m *Monitor) waitLost(ctx context.Context) bool {
	for {
		s := m.conn.GetState()
		if s != connectivity.Ready {
			return true
		}
		if !m.conn.WaitForStateChange(ctx, s) {
			return false
		}
	}
}

// reconnect tries every Interval until the driver answers Probe (ready) and
// its name and capabilities can be read. An unusable driver ends it with an
// error; ctx's end with ctx's error.
func (m *Monitor) reconnect(ctx context.Context) (DriverInfo, error) {
	logger := klog.FromContext(ctx)
	ticker := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	lastLog := m.cfg.Clock.Now()
	for {
		info, err := m.attempt(ctx)
		if err == nil || errors.Is(err, errDriverUnusable) {
			return info, err
		}
		m.setConnected(false, err)
		if now := m.cfg.Clock.Now(); now.Sub(lastLog) >= m.cfg.LogInterval {
			logger.Info("Still no connection to the CSI driver; reconnecting", "downtime", m.downtime().Round(time.Second), "err", err)
			lastLog = now
		}
		select {
		case <-ctx.Done():
			return DriverInfo{}, ctx.Err()
		case <-ticker.C():
		}
	}
}

// attempt reconnects once: Probe must report ready, then the driver's name
// and capabilities are read.
func (m *Monitor) attempt(ctx context.Context) (DriverInfo, error) {
	m.conn.Connect()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	ready, err := rpc.Probe(ctx, m.conn)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("probe: %w", err)
	}
	if !ready {
		return DriverInfo{}, errors.New("the driver answers Probe but is not ready")
	}
	return queryDriver(ctx, m.conn)
}

// driverChange describes how the driver changed in a way this process
// cannot follow, or returns "". The process relies on the name (its
// provisioner name and the CSINode entries it reads), on topology support
// and SINGLE_NODE_MULTI_WRITER (what it puts in requests and PVs: a
// capability that appears matters as much as one that disappears), and on
// GET_CAPACITY when it publishes capacity.
func driverChange(old, cur DriverInfo, usesCapacity bool) string {
	var changes []string
	if cur.Name != old.Name {
		changes = append(changes, fmt.Sprintf("its name is %q, was %q", cur.Name, old.Name))
	}
	describe := func(name string, was, is bool) {
		switch {
		case was && !is:
			changes = append(changes, name+" disappeared")
		case !was && is:
			changes = append(changes, name+" appeared")
		}
	}
	describe("VOLUME_ACCESSIBILITY_CONSTRAINTS", old.SupportsTopology, cur.SupportsTopology)
	describe("SINGLE_NODE_MULTI_WRITER", old.SupportsSingleNodeMultiWriter, cur.SupportsSingleNodeMultiWriter)
	describe("CLONE_VOLUME", old.SupportsClone, cur.SupportsClone)
	describe("CREATE_DELETE_SNAPSHOT", old.SupportsSnapshot, cur.SupportsSnapshot)
	describe("MODIFY_VOLUME", old.SupportsModify, cur.SupportsModify)
	describe("PUBLISH_UNPUBLISH_VOLUME", old.SupportsAttach, cur.SupportsAttach)
	if usesCapacity && old.SupportsCapacity && !cur.SupportsCapacity {
		changes = append(changes, "GET_CAPACITY disappeared (--enable-capacity needs it)")
	}
	return strings.Join(changes, ", ")
}
