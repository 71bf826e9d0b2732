package driverconn

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

// mockProcess is a mock controller that can be stopped and started again on
// the same socket, with another configuration.
type mockProcess struct {
	t      *testing.T
	socket string
	stop   func()
}

func (m *mockProcess) start(ctx context.Context, mutate func(*driver.Config)) {
	m.t.Helper()
	cfg := driver.Config{Endpoint: "unix://" + m.socket, Mode: driver.ModeController,
		Segments: []driver.SegmentConfig{{Topology: map[string]string{"zone": "z1"}, CapacityBytes: gi}}}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := driver.New(cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	m.stop = func() { cancel(); <-done }
	select {
	case <-d.Ready():
	case err := <-done:
		m.t.Fatalf("mock driver: %v", err)
	}
}

func TestDriverChange(t *testing.T) {
	base := DriverInfo{Name: "d", SupportsTopology: true, SupportsCapacity: true}
	tests := []struct {
		name         string
		cur          DriverInfo
		usesCapacity bool
		want         string
	}{
		{name: "unchanged", cur: base},
		{name: "renamed", cur: DriverInfo{Name: "e", SupportsTopology: true, SupportsCapacity: true}, want: `its name is "e", was "d"`},
		{name: "topology gone", cur: DriverInfo{Name: "d", SupportsCapacity: true}, want: "VOLUME_ACCESSIBILITY_CONSTRAINTS disappeared"},
		{name: "multi-writer appeared", cur: DriverInfo{Name: "d", SupportsTopology: true, SupportsCapacity: true, SupportsSingleNodeMultiWriter: true},
			want: "SINGLE_NODE_MULTI_WRITER appeared"},
		{name: "attach appeared", cur: DriverInfo{Name: "d", SupportsTopology: true, SupportsCapacity: true, SupportsAttach: true},
			want: "PUBLISH_UNPUBLISH_VOLUME appeared"},
		{name: "capacity gone, not used", cur: DriverInfo{Name: "d", SupportsTopology: true}},
		{name: "capacity gone, used", cur: DriverInfo{Name: "d", SupportsTopology: true}, usesCapacity: true, want: "GET_CAPACITY disappeared (--enable-capacity needs it)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := driverChange(base, tc.cur, tc.usesCapacity); got != tc.want {
				t.Errorf("driverChange = %q, want %q", got, tc.want)
			}
		})
	}
}

// The monitor notices that the driver went away, reports it (Status, the
// gauge), and when a driver listens on the socket again either reconnects
// (the same driver) or ends Run (a changed or unusable one).
func TestDriverMonitor(t *testing.T) {
	tests := []struct {
		name    string
		back    func(*driver.Config)
		wantErr error
	}{
		{name: "same driver back"},
		{name: "renamed driver", back: func(c *driver.Config) { c.Name = "other.csi.example.com" }, wantErr: ErrDriverChanged},
		{name: "driver without topology", back: func(c *driver.Config) { c.DisableTopology = true }, wantErr: ErrDriverChanged},
		{name: "node-only driver", back: func(c *driver.Config) { c.Mode = driver.ModeNode; c.NodeID = "n1" }, wantErr: errDriverUnusable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			mock := &mockProcess{t: t, socket: filepath.Join(shortDir(t), "csi.sock")}
			mock.start(ctx, nil)
			conn, info, err := Connect(ctx, mock.socket, nil, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			reconnected := make(chan struct{}, 1)
			mon := NewMonitor(conn, MonitorConfig{Address: mock.socket, Driver: info, Interval: 10 * time.Millisecond,
				Metrics: metrics.NewKubeRegistry(), OnReconnect: func(context.Context) { reconnected <- struct{}{} }})
			runErr := make(chan error, 1)
			go func() { runErr <- mon.Run(ctx) }()

			mock.stop()
			var reason string
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				var ok bool
				ok, reason = mon.Status()
				return !ok, nil
			}); err != nil {
				t.Fatalf("the monitor never noticed the driver was gone: %v", err)
			}
			if !strings.Contains(reason, "no connection to CSI driver") || !strings.Contains(reason, mock.socket) {
				t.Errorf("reason %q does not say the driver at %s is gone", reason, mock.socket)
			}
			assertGauge(t, mon, 0, 1)

			mock.start(ctx, tc.back)
			defer mock.stop()
			select {
			case <-reconnected:
				if tc.wantErr != nil {
					t.Fatalf("reconnected, want %v", tc.wantErr)
				}
				if ok, reason := mon.Status(); !ok {
					t.Errorf("Status after reconnection = false, %q", reason)
				}
				assertGauge(t, mon, 1, 1)
			case err := <-runErr:
				if tc.wantErr == nil || !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run = %v, want %v", err, tc.wantErr)
				}
			case <-ctx.Done():
				t.Fatal("neither reconnected nor ended")
			}
		})
	}
}

func assertGauge(t *testing.T, m *Monitor, connected, losses float64) {
	t.Helper()
	if got, err := testutil.GetGaugeMetricValue(m.metrics.connected); err != nil || got != connected {
		t.Errorf("driver_connected = %v (%v), want %v", got, err, connected)
	}
	if got, err := testutil.GetCounterMetricValue(m.metrics.losses); err != nil || got != losses {
		t.Errorf("driver_connection_losses_total = %v (%v), want %v", got, err, losses)
	}
}
