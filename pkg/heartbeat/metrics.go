package heartbeat

import "k8s.io/component-base/metrics"

// Metrics are the heartbeat's Prometheus metrics, in csi-node-publisher's
// subsystem (csi_node_publisher_lease_*). A nil *Metrics records nothing.
type Metrics struct {
	renewing *metrics.Gauge
	renewals *metrics.CounterVec
	pauses   *metrics.CounterVec
}

// NewMetrics registers the heartbeat's metrics in reg.
func NewMetrics(reg metrics.KubeRegistry) *Metrics {
	m := &Metrics{
		renewing: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: "csi_node_publisher", Name: "lease_renewing",
			Help: "1 while the driver's heartbeat Lease is renewed (the driver answers Probe), 0 while it is left to expire."}),
		renewals: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_node_publisher", Name: "lease_renewals_total",
			Help: "Heartbeat Lease writes by result (success, error)."}, []string{"result"}),
		pauses: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_node_publisher", Name: "lease_paused_total",
			Help: "Times the heartbeat Lease stopped being renewed, by reason (probe_failed, not_ready, plugin_info_failed)."}, []string{"reason"}),
	}
	reg.MustRegister(m.renewing, m.renewals, m.pauses)
	return m
}

func (m *Metrics) setRenewing(on bool) {
	if m == nil {
		return
	}
	if on {
		m.renewing.Set(1)
	} else {
		m.renewing.Set(0)
	}
}

func (m *Metrics) observeRenewal(err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.renewals.WithLabelValues(result).Inc()
}

func (m *Metrics) observePause(reason string) {
	if m != nil {
		m.pauses.WithLabelValues(reason).Inc()
	}
}
