package optionalapi

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

var gr = schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}

// fakeAPI answers probes with err until served is set.
type fakeAPI struct {
	served  atomic.Bool
	err     atomic.Value // error
	probes  atomic.Int32
	started atomic.Int32
}

func (f *fakeAPI) config() Config {
	return Config{
		What: "VolumeSnapshots", Without: "restores wait",
		Probe: func(context.Context) error {
			f.probes.Add(1)
			if f.served.Load() {
				return nil
			}
			return f.err.Load().(error)
		},
		Start:       func(context.Context) { f.started.Add(1) },
		HasSynced:   func() bool { return f.started.Load() > 0 },
		MinInterval: 10 * time.Millisecond,
		// Long enough that only a poke can explain a second probe.
		MaxInterval: time.Hour,
	}
}

func TestAPIAppearsLater(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want State
	}{
		{name: "CRD not installed", err: apierrors.NewNotFound(gr, ""), want: NotServed},
		{name: "RBAC denies", err: apierrors.NewForbidden(gr, "", errors.New("no rule")), want: Forbidden},
		{name: "server down", err: errors.New("connection refused"), want: Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			f := &fakeAPI{}
			f.err.Store(tc.err)
			cfg := f.config()
			cfg.MinInterval = time.Hour // no backoff probe during the test: pokes only
			a := New(cfg)
			var called atomic.Int32
			a.OnReady(func() { called.Add(1) })
			done := make(chan struct{})
			go func() { a.Run(ctx); close(done) }()
			// The probe counts itself when it starts; the state follows
			// once it returned.
			waitFor(t, ctx, func() bool { return f.probes.Load() == 1 && a.State() == tc.want })
			if got := a.State(); got != tc.want || a.Ready() {
				t.Fatalf("state %v (ready %v) after a failed probe, want %v", got, a.Ready(), tc.want)
			}
			if f.started.Load() != 0 {
				t.Fatal("informers started although the probe failed")
			}
			f.served.Store(true)
			// Pokes within MinInterval of the last probe wait for it.
			a.Poke()
			if a.WaitReady(ctx, 50*time.Millisecond) {
				t.Fatal("ready although the pokes came within MinInterval of the last probe")
			}
			cancel()
			<-done
		})
	}
}

func TestPokeProbesAtOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &fakeAPI{}
	f.err.Store(error(apierrors.NewNotFound(gr, "")))
	a := New(f.config())
	var called atomic.Int32
	a.OnReady(func() { called.Add(1) })
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	waitFor(t, ctx, func() bool { return a.State() == NotServed })
	f.served.Store(true)
	if !a.WaitReady(ctx, 10*time.Second) {
		t.Fatalf("not ready 10 s after a poke (state %v, %d probes)", a.State(), f.probes.Load())
	}
	<-done
	if called.Load() != 1 || f.started.Load() != 1 {
		t.Errorf("OnReady called %d times, Start %d times; want once each", called.Load(), f.started.Load())
	}
	// A callback added once ready runs at once.
	a.OnReady(func() { called.Add(1) })
	if called.Load() != 2 {
		t.Error("OnReady after Ready did not run its callback")
	}
}

func TestBackoffProbesAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &fakeAPI{}
	f.err.Store(error(apierrors.NewNotFound(gr, "")))
	cfg := f.config()
	cfg.MaxInterval = 20 * time.Millisecond
	a := New(cfg)
	go a.Run(ctx)
	waitFor(t, ctx, func() bool { return f.probes.Load() >= 3 })
	f.served.Store(true)
	waitFor(t, ctx, a.Ready)
}

func waitFor(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("condition not met in 10 s: %v", err)
	}
}
