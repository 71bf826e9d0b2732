package driverconn

import "k8s.io/component-base/metrics"

// metricsSubsystem is the provisioner's: the metrics keep the names they
// had when the connection code lived in package provisioner.
const metricsSubsystem = "csi_topology_provisioner"

// driverMetrics tell whether the driver is connected. A nil *driverMetrics
// records nothing.
type driverMetrics struct {
	connected *metrics.Gauge
	losses    *metrics.Counter
}

// newDriverMetrics registers the driver connection's metrics in reg.
func newDriverMetrics(reg metrics.KubeRegistry) *driverMetrics {
	m := &driverMetrics{
		connected: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "driver_connected",
			Help: "1 while the connection to the CSI driver is up, 0 while it is lost and being re-established."}),
		losses: metrics.NewCounter(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "driver_connection_losses_total",
			Help: "Times the connection to the CSI driver was lost (counts outages shorter than a scrape interval too)."}),
	}
	reg.MustRegister(m.connected, m.losses)
	return m
}

func (m *driverMetrics) setConnected(connected bool) {
	if m == nil {
		return
	}
	v := 0.0
	if connected {
		v = 1
	}
	m.connected.Set(v)
}

func (m *driverMetrics) lost() {
	if m != nil {
		m.losses.Inc()
	}
}
