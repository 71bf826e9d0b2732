package fullsegments

import "k8s.io/component-base/metrics"

// metricsSubsystem is the provisioner's, so the gauge keeps its name.
const metricsSubsystem = "csi_topology_provisioner"

// Metrics is the gauge of Holds' marks. A nil *Metrics records nothing.
type Metrics struct {
	gauge *metrics.Gauge
}

// NewMetrics registers the full_segments gauge in reg.
func NewMetrics(reg metrics.KubeRegistry) *Metrics {
	m := &Metrics{gauge: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "full_segments",
		Help: "(storage class, segment) pairs the driver recently found without room, each for the smallest size refused; delayed claims there at least that large wait for the hold."})}
	reg.MustRegister(m.gauge)
	return m
}

func (m *Metrics) set(n int) {
	if m != nil {
		m.gauge.Set(float64(n))
	}
}
