package optionalapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// State is what the last probe of an optional API found.
type State int32

// The states of an optional API.
const (
	// Unknown: not probed yet, or the last probe failed for another reason
	// (the API server did not answer).
	Unknown State = iota
	// NotServed: the API server does not serve the resource (a CRD is not
	// installed, or the Kubernetes release predates the API).
	NotServed
	// Forbidden: RBAC does not let this process list the resource.
	Forbidden
	// Ready: the informers are started and synced.
	Ready
)

func (s State) String() string {
	switch s {
	case NotServed:
		return "NotServed"
	case Forbidden:
		return "Forbidden"
	case Ready:
		return "Ready"
	}
	return "Unknown"
}

// Defaults of Config.
const (
	DefaultMinInterval = time.Second
	DefaultMaxInterval = time.Minute
)

// Config describes one optional API.
type Config struct {
	// What names the API in log lines, e.g. "VolumeSnapshots
	// (snapshot.storage.k8s.io/v1)".
	What string
	// Without says what the process does while the API is missing, e.g.
	// "restores are not kept in reach of their snapshot's volume".
	Without string
	// Probe lists at most one object the way the informers will (same
	// client, namespace and selector); nil means the API is served and
	// readable.
	Probe func(ctx context.Context) error
	// Start starts the informers, once, after the first successful probe;
	// they run until ctx is done.
	Start func(ctx context.Context)
	// HasSynced reports whether the informers Start started have synced.
	HasSynced func() bool
	// MinInterval and MaxInterval bound the time between two probes: it
	// doubles from MinInterval after each failed probe up to MaxInterval.
	// Poke probes at once, but never twice within MinInterval. Defaults
	// DefaultMinInterval and DefaultMaxInterval.
	MinInterval, MaxInterval time.Duration
}

// API follows one optional API: it probes it until it is served and
// readable, then starts and syncs its informers. Safe for concurrent use.
type API struct {
	cfg   Config
	state atomic.Int32
	poke  chan struct{}
	ready chan struct{}

	mu      sync.Mutex
	onReady []func()
}

// New returns an API for cfg; call Run to follow it.
func New(cfg Config) *API {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.MaxInterval < cfg.MinInterval {
		cfg.MaxInterval = max(DefaultMaxInterval, cfg.MinInterval)
	}
	return &API{cfg: cfg, poke: make(chan struct{}, 1), ready: make(chan struct{})}
}

// State returns what the last probe found; Ready once the informers have
// synced, and for good.
func (a *API) State() State { return State(a.state.Load()) }

// Ready reports whether the informers have synced: their listers can be
// trusted.
func (a *API) Ready() bool { return a.State() == Ready }

// Poke asks for a probe now (at most one per MinInterval); it never blocks.
func (a *API) Poke() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// OnReady has f called once, from Run's goroutine, when the informers have
// synced (at once, from this goroutine, when they already have).
func (a *API) OnReady(f func()) {
	a.mu.Lock()
	if !a.Ready() {
		a.onReady = append(a.onReady, f)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	f()
}

// WaitReady pokes the API and waits until its informers have synced, ctx is
// done or timeout passes; it returns Ready().
func (a *API) WaitReady(ctx context.Context, timeout time.Duration) bool {
	if a.Ready() {
		return true
	}
	a.Poke()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-a.ready:
	case <-ctx.Done():
	case <-t.C:
	}
	return a.Ready()
}

// Run probes the API until it is served and readable, starts its informers,
// waits for them to sync and returns; or returns when ctx is done. It logs
// once when the API is found missing or forbidden (again only if that
// changes) and once when it is ready.
func (a *API) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	interval := a.cfg.MinInterval
	var last time.Time
	for {
		last = time.Now()
		err := a.cfg.Probe(ctx)
		if err == nil {
			break
		}
		a.observe(logger, err)
		if !a.sleep(ctx, interval, last) {
			return
		}
		interval = min(2*interval, a.cfg.MaxInterval)
	}
	a.cfg.Start(ctx)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return a.cfg.HasSynced(), nil
	}); err != nil {
		return
	}
	was := a.State()
	a.mu.Lock()
	a.state.Store(int32(Ready))
	callbacks := a.onReady
	a.onReady = nil
	a.mu.Unlock()
	close(a.ready)
	if was == Unknown {
		logger.Info("Optional API served", "api", a.cfg.What)
	} else {
		logger.Info("Optional API served now: picked up without a restart", "api", a.cfg.What, "before", was.String())
	}
	for _, f := range callbacks {
		f()
	}
}

// observe records a failed probe, logging a change of state once.
func (a *API) observe(logger klog.Logger, err error) {
	st := Unknown
	switch {
	case apierrors.IsNotFound(err):
		st = NotServed
	case apierrors.IsForbidden(err):
		st = Forbidden
	}
	old := State(a.state.Swap(int32(st)))
	switch {
	case st == old:
	case st == NotServed:
		logger.Info("Optional API not served; looked for again until it is", "api", a.cfg.What, "meanwhile", a.cfg.Without)
	case st == Forbidden:
		logger.Info("Optional API may not be listed (RBAC); looked for again until it may", "api", a.cfg.What,
			"meanwhile", a.cfg.Without, "err", err)
	default:
		logger.V(2).Info("Probing an optional API failed; retrying", "api", a.cfg.What, "err", err)
	}
}

// sleep waits until interval has passed since last, or a poke at least
// MinInterval after last; false when ctx is done.
func (a *API) sleep(ctx context.Context, interval time.Duration, last time.Time) bool {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-a.poke:
			if d := a.cfg.MinInterval - time.Since(last); d > 0 {
				if !t.Stop() {
					return true
				}
				t.Reset(min(d, interval))
				continue
			}
			return true
		}
	}
}
