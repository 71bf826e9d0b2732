package inflight

import "k8s.io/component-base/metrics"

// metricsSubsystem is the provisioner's metric subsystem, which the
// record's metrics share.
const metricsSubsystem = "csi_topology_provisioner"

// keeperMetrics are the in-flight record's metrics. A nil *keeperMetrics
// records nothing.
type keeperMetrics struct {
	open    *metrics.Gauge
	cleared *metrics.CounterVec
}

func newKeeperMetrics(reg metrics.KubeRegistry) *keeperMetrics {
	if reg == nil {
		return nil
	}
	m := &keeperMetrics{
		open: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "in_flight_records",
			Help: "Claims carrying the in-flight finalizer (" + Finalizer + ") without a bound volume: a volume of their name may exist without a PV."}),
		cleared: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "in_flight_records_cleared_total",
			Help: "In-flight records removed, by outcome: pv_exists (the claim has a PV, which governs the volume; with --bind-through the record mostly goes in the write that binds the claim), deleted (the volume was deleted), nothing_created (the driver had no volume of that name), abandoned (the volume's ID could not be learnt; see the claim's InFlightVolumeAbandoned Event)."},
			[]string{"outcome"}),
	}
	reg.MustRegister(m.open, m.cleared)
	return m
}

func (m *keeperMetrics) setOpen(n int) {
	if m != nil {
		m.open.Set(float64(n))
	}
}

func (m *keeperMetrics) clearedOne(o Outcome) {
	if m != nil {
		m.cleared.WithLabelValues(string(o)).Inc()
	}
}
