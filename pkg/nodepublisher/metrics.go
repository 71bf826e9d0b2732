package nodepublisher

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/component-base/metrics"
)

// PublisherMetrics are the publisher's Prometheus metrics. A nil
// *PublisherMetrics records nothing.
type PublisherMetrics struct {
	driverUp   *metrics.Gauge
	count      *metrics.Gauge
	publishes  *metrics.CounterVec
	collisions *metrics.Counter
}

// NewPublisherMetrics registers the publisher's metrics in reg.
func NewPublisherMetrics(reg metrics.KubeRegistry) *PublisherMetrics {
	m := &PublisherMetrics{
		driverUp: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: "csi_node_publisher", Name: "driver_up",
			Help: "1 when the CSI driver answers, 0 when it is unreachable (the last entry stays published)."}),
		count: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: "csi_node_publisher", Name: "allocatable_count",
			Help: "The published allocatable volume count; -1 when the driver reports no limit."}),
		publishes: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_node_publisher", Name: "publish_total",
			Help: "Publish attempts by result (success, error)."}, []string{"result"}),
		collisions: metrics.NewCounter(&metrics.CounterOpts{Subsystem: "csi_node_publisher", Name: "label_collisions_total",
			Help: "Topology labels found with another value than the driver reports."}),
	}
	reg.MustRegister(m.driverUp, m.count, m.publishes, m.collisions)
	return m
}

func (m *PublisherMetrics) setDriverUp(up bool) {
	if m == nil {
		return
	}
	if up {
		m.driverUp.Set(1)
	} else {
		m.driverUp.Set(0)
	}
}

func (m *PublisherMetrics) setCount(e storagev1.CSINodeDriver) {
	if m == nil {
		return
	}
	if c := allocatableCount(e); c != nil {
		m.count.Set(float64(*c))
	} else {
		m.count.Set(-1)
	}
}

func (m *PublisherMetrics) observePublish(err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.publishes.WithLabelValues(result).Inc()
}

func (m *PublisherMetrics) observeCollision() {
	if m != nil {
		m.collisions.Inc()
	}
}
