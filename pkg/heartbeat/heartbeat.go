package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Reasons a Heartbeat stops renewing, as logged and counted in
// csi_node_publisher_lease_paused_total{reason}.
const (
	// pauseProbeFailed: Probe failed, e.g. the driver's socket is gone or
	// nothing answers on it (a crashed or restarting driver).
	pauseProbeFailed = "probe_failed"
	// pauseNotReady: Probe answered ready=false.
	pauseNotReady = "not_ready"
	// pausePluginInfoFailed: the driver answered Probe but not
	// GetPluginInfo, which names the Lease.
	pausePluginInfoFailed = "plugin_info_failed"
)

// DriverClient is the subset of the CSI Identity service the heartbeat
// calls; safe for concurrent use.
type DriverClient interface {
	GetPluginInfo(ctx context.Context, in *csi.GetPluginInfoRequest, opts ...grpc.CallOption) (*csi.GetPluginInfoResponse, error)
	Probe(ctx context.Context, in *csi.ProbeRequest, opts ...grpc.CallOption) (*csi.ProbeResponse, error)
}

// errDriverName is returned when the driver's name cannot be the value of
// LeaseDriverLabel; the CSI spec rules such names out.
var errDriverName = errors.New("driver name unusable as a label value")

// Config configures a Heartbeat.
type Config struct {
	// NodeName is the node the driver runs on: the Lease's holderIdentity
	// and owner. Required.
	NodeName string
	// Namespace holds the Lease. Required.
	Namespace string
	// LeaseDuration is the Lease's leaseDurationSeconds: how long after its
	// last renewal a silent driver counts as live. Whole seconds; default
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewInterval is how often the Lease is renewed (one API write each)
	// while the driver answers Probe; below LeaseDuration. Default
	// LeaseDuration / 3.
	RenewInterval time.Duration
	// RetryInterval is how often a driver that does not answer is probed
	// again (no API call), and the first delay before retrying a failed
	// renewal (doubling up to RenewInterval). Default 1s.
	RetryInterval time.Duration
	// CallTimeout bounds each CSI and API call; default 10s.
	CallTimeout time.Duration
	// Clock is the time source; default the real clock.
	Clock clock.Clock
}

// DefaultLeaseDuration is the default heartbeat TTL. With the default
// renewal every 20 s, a 5 000-node cluster sees 250 Lease writes/s, half
// what the kubelets' node Leases cost (40 s, renewed every 10 s); see
// docs/node-publisher.md.
const DefaultLeaseDuration = 60 * time.Second

func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 3
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c
}

// Validate reports what New would refuse in c (with defaults
// applied), so that a command can fail before connecting to the driver.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.NodeName == "":
		return errors.New("a node name is required (--node-name or NODE_NAME)")
	case c.Namespace == "":
		return errors.New("the heartbeat Lease needs a namespace (--lease-namespace, NAMESPACE or the pod's service account namespace)")
	case c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0:
		return fmt.Errorf("--lease-duration %s: want whole seconds, at least 1s", c.LeaseDuration)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration:
		return fmt.Errorf("--lease-renew-interval %s: want more than 0 and less than --lease-duration %s", c.RenewInterval, c.LeaseDuration)
	}
	return nil
}

// Heartbeat keeps the driver's heartbeat Lease on one node (LeaseName of
// driver and node, labelled LeaseDriverLabel, owned by the Node so that it
// goes with it) renewed while the driver answers Probe: every RenewInterval
// it probes the driver and, when it is ready (ready=true or unset), writes
// renewTime (one Update). When Probe fails or answers ready=false it stops
// renewing, so the Lease expires LeaseDuration after the last renewal, and
// says why once (log line, csi_node_publisher_lease_paused_total); it then
// probes every RetryInterval and renews at once when the driver answers
// again. It never deletes the Lease: a publisher restart (rolling update)
// shorter than LeaseDuration goes unnoticed by consumers.
//
// API cost: one Update per RenewInterval while the driver is live, none
// while it is not; one Get after a failed write, and one Get of the Node
// plus one Create when the Lease is missing. Run is not safe for
// concurrent use; one Heartbeat per node and driver.
type Heartbeat struct {
	cfg     Config
	client  kubernetes.Interface
	driver  DriverClient
	metrics *Metrics

	driverName string
	name       string
	lease      *coordinationv1.Lease // last written or read; nil: read it first
	renewing   bool
	lastRenew  time.Time // of this process; zero before the first
	paused     string    // reason of the current pause, "" while renewing
	backoff    time.Duration
}

// New returns a Heartbeat; metrics may be nil.
func New(cfg Config, client kubernetes.Interface, driver DriverClient, metrics *Metrics) (*Heartbeat, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Heartbeat{cfg: cfg, client: client, driver: driver, metrics: metrics, backoff: cfg.RetryInterval}, nil
}

// Run beats until ctx is done. It returns an error only when the driver's
// name cannot be the value of LeaseDriverLabel (the CSI spec rules such
// names out); every other failure is retried.
func (h *Heartbeat) Run(ctx context.Context) error {
	for {
		next, err := h.beat(ctx)
		if err != nil {
			return err
		}
		t := h.cfg.Clock.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// beat probes the driver and renews the Lease when it is ready; it returns
// the delay until the next beat.
func (h *Heartbeat) beat(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	reason, err := h.probe(ctx)
	if errors.Is(err, errDriverName) {
		return 0, err
	}
	if reason != "" {
		h.pause(ctx, reason, err)
		return h.cfg.RetryInterval, nil
	}
	if err := h.renew(ctx); err != nil {
		h.metrics.observeRenewal(err)
		delay := h.backoff
		h.backoff = min(2*h.backoff, h.cfg.RenewInterval)
		logger.Error(err, "Renewing the driver's heartbeat Lease failed; retrying",
			"lease", klog.KRef(h.cfg.Namespace, h.name), "retryIn", delay)
		return delay, nil
	}
	h.metrics.observeRenewal(nil)
	h.metrics.setRenewing(true)
	h.backoff = h.cfg.RetryInterval
	last := h.lastRenew
	h.lastRenew = h.cfg.Clock.Now()
	switch {
	case h.paused != "":
		kv := []any{"driver", h.driverName, "lease", klog.KRef(h.cfg.Namespace, h.name)}
		if !last.IsZero() {
			kv = append(kv, "silentFor", h.lastRenew.Sub(last))
		}
		logger.Info("CSI driver live again; renewed its heartbeat Lease", kv...)
	case !h.renewing:
		logger.V(2).Info("Renewing the driver's heartbeat Lease", "driver", h.driverName,
			"lease", klog.KRef(h.cfg.Namespace, h.name), "leaseDuration", h.cfg.LeaseDuration, "renewInterval", h.cfg.RenewInterval)
	}
	h.renewing, h.paused = true, ""
	return h.cfg.RenewInterval, nil
}

// probe returns "" when the driver is ready, else a Pause* reason and the
// error behind it. It learns the driver's name (and the Lease's) once.
func (h *Heartbeat) probe(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	resp, err := h.driver.Probe(cctx, &csi.ProbeRequest{})
	if err != nil {
		return pauseProbeFailed, err
	}
	if ready := resp.GetReady(); ready != nil && !ready.GetValue() {
		return pauseNotReady, nil
	}
	if h.driverName != "" {
		return "", nil
	}
	pi, err := h.driver.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return pausePluginInfoFailed, err
	}
	if errs := validation.IsValidLabelValue(pi.GetName()); pi.GetName() == "" || len(errs) > 0 {
		return pausePluginInfoFailed, fmt.Errorf("%w: %q: %v", errDriverName, pi.GetName(), errs)
	}
	h.driverName = pi.GetName()
	h.name = LeaseName(h.driverName, h.cfg.NodeName)
	return "", nil
}

// pause records that the driver is not live; logged once per pause.
func (h *Heartbeat) pause(ctx context.Context, reason string, err error) {
	if h.paused == reason {
		return
	}
	h.metrics.observePause(reason)
	h.metrics.setRenewing(false)
	logger := klog.FromContext(ctx)
	kv := []any{"driver", h.driverName, "node", h.cfg.NodeName, "reason", reason}
	if h.name != "" {
		kv = append(kv, "lease", klog.KRef(h.cfg.Namespace, h.name))
	}
	if !h.lastRenew.IsZero() {
		kv = append(kv, "lastRenewal", h.lastRenew, "expiresAt", h.lastRenew.Add(h.cfg.LeaseDuration))
	}
	const msg = "CSI driver not live; no longer renewing its heartbeat Lease, which expires"
	if err != nil {
		logger.Error(err, msg, kv...)
	} else {
		logger.Info(msg, kv...)
	}
	h.paused = reason
}

// renew writes renewTime: an Update of the Lease last seen, after a Get
// when there is none, or a Create when the Lease is missing. A conflict or
// a Lease deleted meanwhile is retried once on fresh data.
func (h *Heartbeat) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	leases := h.client.CoordinationV1().Leases(h.cfg.Namespace)
	for attempt := 0; attempt < 2; attempt++ {
		if h.lease == nil {
			lease, err := leases.Get(ctx, h.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				lease, err = h.create(ctx)
				if apierrors.IsAlreadyExists(err) {
					continue
				}
				if err != nil {
					return fmt.Errorf("creating Lease %s/%s: %w", h.cfg.Namespace, h.name, err)
				}
				// Created with renewTime now: nothing left to update.
				h.lease = lease
				return nil
			case err != nil:
				return fmt.Errorf("reading Lease %s/%s: %w", h.cfg.Namespace, h.name, err)
			}
			h.lease = lease
		}
		next := h.lease.DeepCopy()
		h.fill(next)
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			h.lease = updated
			return nil
		}
		h.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) || attempt == 1 {
			return fmt.Errorf("renewing Lease %s/%s: %w", h.cfg.Namespace, h.name, err)
		}
	}
	return fmt.Errorf("creating Lease %s/%s: it exists, but cannot be read", h.cfg.Namespace, h.name)
}

// create makes the Lease, owned by the Node.
func (h *Heartbeat) create(ctx context.Context) (*coordinationv1.Lease, error) {
	node, err := h.client.CoreV1().Nodes().Get(ctx, h.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %q to own the heartbeat Lease: %w", h.cfg.NodeName, err)
	}
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: h.name, Namespace: h.cfg.Namespace,
			Labels: map[string]string{LeaseDriverLabel: h.driverName},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(h.cfg.NodeName),
			LeaseDurationSeconds: ptr.To(int32(h.cfg.LeaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
	created, err := h.client.CoordinationV1().Leases(h.cfg.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Created the driver's heartbeat Lease", "lease", klog.KObj(created), "node", klog.KObj(node))
	}
	return created, err
}

// fill renews l: holder, duration, label and renewTime now. A Lease that had
// expired (the driver was silent, or the publisher down, for longer than
// its duration) is acquired anew: acquireTime now and one more transition,
// so leaseTransitions counts the driver's returns.
func (h *Heartbeat) fill(l *coordinationv1.Lease) {
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	if live, _, known := LeaseLive(l, now.Time); !known || !live || ptr.Deref(l.Spec.HolderIdentity, "") != h.cfg.NodeName {
		if known {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity = ptr.To(h.cfg.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(h.cfg.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LeaseDriverLabel] = h.driverName
}
