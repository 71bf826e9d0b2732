package heartbeat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	leaseNS    = "csi-topology"
	testDriver = driver.DefaultName
)

// probedDriver answers Probe as told: an error, ready=false, or ready.
// Safe for concurrent use.
type probedDriver struct {
	DriverClient
	mu     sync.Mutex
	err    error
	ready  *bool
	name   string
	probes int
}

func (d *probedDriver) set(err error, ready *bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err, d.ready = err, ready
}

func (d *probedDriver) Probe(context.Context, *csi.ProbeRequest, ...grpc.CallOption) (*csi.ProbeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probes++
	if d.err != nil {
		return nil, d.err
	}
	resp := &csi.ProbeResponse{}
	if d.ready != nil {
		resp.Ready = wrapperspb.Bool(*d.ready)
	}
	return resp, nil
}

func (d *probedDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest, ...grpc.CallOption) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "1"}, nil
}

// node is the Node the heartbeat's Lease belongs to.
func node(labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: labels}}
}

// leaseWrites counts the Lease creates and updates client received.
func leaseWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "leases" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

func getLease(t *testing.T, ctx context.Context, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(leaseNS).Get(ctx, LeaseName(testDriver, "n1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func micro(t time.Time) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(t)) }

// TestHeartbeat walks one Heartbeat through a driver's life with a fake
// clock: the Lease is created owned by the Node and renewed once per
// interval while Probe answers; a failing or unready Probe stops the
// renewals (said once) until the Lease expires; the first good Probe
// renews at once.
func TestHeartbeat(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(node(nil))
	clk := testingclock.NewFakeClock(t0)
	drv := &probedDriver{name: testDriver}
	reg := metrics.NewKubeRegistry()
	m := NewMetrics(reg)
	hb, err := New(Config{NodeName: "n1", Namespace: leaseNS, LeaseDuration: 40 * time.Second,
		RenewInterval: 10 * time.Second, Clock: clk}, client, drv, m)
	if err != nil {
		t.Fatal(err)
	}
	notReady := ptr.To(false)
	probeErr := status.Error(codes.Unavailable, "connection refused")

	steps := []struct {
		name       string
		probeErr   error
		ready      *bool
		advance    time.Duration
		beats      int // beats after advancing, each RetryInterval apart when next is 1s
		wantNext   time.Duration
		wantWrites int // total so far
		wantRenew  time.Time
		wantLive   bool // LeaseLive at the clock's time after the step
		wantAcq    time.Time
		wantTrans  int32
		wantPaused map[string]float64
		renewing   float64
	}{
		{name: "first beat creates the lease", beats: 1, wantNext: 10 * time.Second, wantWrites: 1,
			wantRenew: t0, wantLive: true, wantAcq: t0, renewing: 1},
		{name: "renewed once per interval while Probe answers", advance: 10 * time.Second, beats: 1, wantNext: 10 * time.Second,
			wantWrites: 2, wantRenew: t0.Add(10 * time.Second), wantLive: true, wantAcq: t0, renewing: 1},
		{name: "ready unset counts as ready", advance: 10 * time.Second, beats: 1, wantNext: 10 * time.Second,
			wantWrites: 3, wantRenew: t0.Add(20 * time.Second), wantLive: true, wantAcq: t0, renewing: 1},
		{name: "Probe fails: no renewal, probed every second", probeErr: probeErr, advance: 10 * time.Second, beats: 25,
			wantNext: time.Second, wantWrites: 3, wantRenew: t0.Add(20 * time.Second), wantLive: true, wantAcq: t0,
			wantPaused: map[string]float64{pauseProbeFailed: 1}},
		{name: "lease expires while Probe fails", probeErr: probeErr, advance: 30 * time.Second, beats: 1,
			wantNext: time.Second, wantWrites: 3, wantRenew: t0.Add(20 * time.Second), wantAcq: t0,
			wantPaused: map[string]float64{pauseProbeFailed: 1}},
		{name: "ready=false: still no renewal, new reason", ready: notReady, advance: time.Second, beats: 3,
			wantNext: time.Second, wantWrites: 3, wantRenew: t0.Add(20 * time.Second), wantAcq: t0,
			wantPaused: map[string]float64{pauseProbeFailed: 1, pauseNotReady: 1}},
		{name: "driver back: renewed at once, acquired anew", ready: ptr.To(true), advance: time.Second, beats: 1,
			wantNext: 10 * time.Second, wantWrites: 4, wantRenew: t0.Add(88 * time.Second),
			wantLive: true, wantAcq: t0.Add(88 * time.Second), wantTrans: 1,
			wantPaused: map[string]float64{pauseProbeFailed: 1, pauseNotReady: 1}, renewing: 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			drv.set(s.probeErr, s.ready)
			clk.Step(s.advance)
			var next time.Duration
			for i := 0; i < s.beats; i++ {
				if i > 0 {
					clk.Step(next)
				}
				if next, err = hb.beat(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if next != s.wantNext {
				t.Errorf("next beat in %s, want %s", next, s.wantNext)
			}
			if got := leaseWrites(client); got != s.wantWrites {
				t.Errorf("%d Lease writes, want %d", got, s.wantWrites)
			}
			l := getLease(t, ctx, client)
			want := coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: micro(s.wantRenew), AcquireTime: micro(s.wantAcq), LeaseTransitions: ptr.To(s.wantTrans)}
			if diff := cmp.Diff(want, l.Spec); diff != "" {
				t.Errorf("lease spec (-want +got):\n%s", diff)
			}
			if live, _, known := LeaseLive(l, clk.Now()); live != s.wantLive || !known {
				t.Errorf("LeaseLive at %s = %v, %v; want %v", clk.Now().Sub(t0), live, known, s.wantLive)
			}
			if got, _ := testutil.GetGaugeMetricValue(m.renewing); got != s.renewing {
				t.Errorf("lease_renewing = %v, want %v", got, s.renewing)
			}
			for _, reason := range []string{pauseProbeFailed, pauseNotReady, pausePluginInfoFailed} {
				got, _ := testutil.GetCounterMetricValue(m.pauses.WithLabelValues(reason))
				if got != s.wantPaused[reason] {
					t.Errorf("lease_paused_total{reason=%s} = %v, want %v", reason, got, s.wantPaused[reason])
				}
			}
		})
	}

	l := getLease(t, ctx, client)
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}}
	if diff := cmp.Diff(wantOwner, l.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
	if l.Labels[LeaseDriverLabel] != testDriver || !strings.HasPrefix(l.Name, testDriver+"-n1-") {
		t.Errorf("lease %s labels %v, want the driver's", l.Name, l.Labels)
	}
}

// Failed API writes are retried with a doubling delay up to the renew
// interval; a conflict or a Lease deleted meanwhile is fixed within the
// same beat.
func TestHeartbeatAPIErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(node(nil))
	clk := testingclock.NewFakeClock(t0)
	m := NewMetrics(metrics.NewKubeRegistry())
	hb, err := New(Config{NodeName: "n1", Namespace: leaseNS, LeaseDuration: 40 * time.Second,
		RenewInterval: 10 * time.Second, Clock: clk}, client, &probedDriver{name: testDriver}, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hb.beat(ctx); err != nil {
		t.Fatal(err)
	}
	leaseRes := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	failing := 0 // the next failing update calls fail with this
	var failWith error
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing > 0 {
			failing--
			return true, nil, failWith
		}
		return false, nil, nil
	})

	t.Run("conflict: read again and renewed in the same beat", func(t *testing.T) {
		client.ClearActions()
		failing, failWith = 1, apierrors.NewConflict(leaseRes, "x", errors.New("changed"))
		clk.Step(10 * time.Second)
		if next, err := hb.beat(ctx); err != nil || next != 10*time.Second {
			t.Fatalf("beat = %s, %v", next, err)
		}
		var verbs []string
		for _, a := range client.Actions() {
			verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
		}
		if diff := cmp.Diff([]string{"update leases", "get leases", "update leases"}, verbs); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if got := getLease(t, ctx, client).Spec.RenewTime; !got.Time.Equal(t0.Add(10 * time.Second)) {
			t.Errorf("renewTime %v", got)
		}
	})
	t.Run("lease deleted: created again, owned by the node", func(t *testing.T) {
		if err := client.CoordinationV1().Leases(leaseNS).Delete(ctx, LeaseName(testDriver, "n1"), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second)
		if next, err := hb.beat(ctx); err != nil || next != 10*time.Second {
			t.Fatalf("beat = %s, %v", next, err)
		}
		l := getLease(t, ctx, client)
		if !l.Spec.RenewTime.Time.Equal(t0.Add(20*time.Second)) || len(l.OwnerReferences) != 1 {
			t.Errorf("recreated lease %+v", l)
		}
	})
	t.Run("server errors back off up to the renew interval", func(t *testing.T) {
		failing, failWith = 100, apierrors.NewInternalError(errors.New("etcd down"))
		var delays []time.Duration
		for i := 0; i < 6; i++ {
			next, err := hb.beat(ctx)
			if err != nil {
				t.Fatal(err)
			}
			delays = append(delays, next)
			clk.Step(next)
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
		if diff := cmp.Diff(want, delays); diff != "" {
			t.Errorf("retry delays (-want +got):\n%s", diff)
		}
		if got, _ := testutil.GetCounterMetricValue(m.renewals.WithLabelValues("error")); got != 6 {
			t.Errorf("lease_renewals_total{result=error} = %v, want 6", got)
		}
		failing = 0
		if next, _ := hb.beat(ctx); next != 10*time.Second {
			t.Errorf("after recovery next beat in %s, want the renew interval", next)
		}
	})
}

// Run renews on its clock's schedule and ends with its context.
func TestHeartbeatRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(node(nil))
	clk := testingclock.NewFakeClock(t0)
	hb, err := New(Config{NodeName: "n1", Namespace: leaseNS, Clock: clk}, client, &probedDriver{name: testDriver}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- hb.Run(ctx) }()
	for i, want := range []time.Time{t0, t0.Add(20 * time.Second), t0.Add(40 * time.Second)} {
		if i > 0 {
			clk.Step(20 * time.Second) // the default renew interval of the default 60s lease
		}
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(leaseNS).Get(ctx, LeaseName(testDriver, "n1"), metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime.Time.Equal(want) && clk.HasWaiters(), nil
		}); err != nil {
			t.Fatalf("renewal %d at %s not seen: %v", i, want, err)
		}
	}
	if got := *getLease(t, ctx, client).Spec.LeaseDurationSeconds; got != 60 {
		t.Errorf("leaseDurationSeconds = %d, want the default 60", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestHeartbeatConfig(t *testing.T) {
	ok := Config{NodeName: "n1", Namespace: leaseNS}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "no node", mutate: func(c *Config) { c.NodeName = "" }, wantErr: "node name"},
		{name: "no namespace", mutate: func(c *Config) { c.Namespace = "" }, wantErr: "--lease-namespace"},
		{name: "duration not whole seconds", mutate: func(c *Config) { c.LeaseDuration = 1500 * time.Millisecond }, wantErr: "whole seconds"},
		{name: "negative duration", mutate: func(c *Config) { c.LeaseDuration = -time.Second }, wantErr: "whole seconds"},
		{name: "renew not below duration", mutate: func(c *Config) { c.RenewInterval = c.LeaseDuration }, wantErr: "--lease-renew-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok.withDefaults()
			cfg.LeaseDuration = 40 * time.Second
			tc.mutate(&cfg)
			_, err := New(cfg, fake.NewClientset(), &probedDriver{}, nil)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("New = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	t.Run("a driver name that cannot be a label value ends Run", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		hb, err := New(ok, fake.NewClientset(node(nil)), &probedDriver{name: strings.Repeat("d", 64)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := hb.Run(ctx); !errors.Is(err, errDriverName) {
			t.Errorf("Run = %v, want errDriverName", err)
		}
	})
}
