package noderouter

import "k8s.io/component-base/metrics"

// routerMetrics are csi-node-router's metrics (csi_node_router_*). A nil
// *routerMetrics records nothing.
type routerMetrics struct {
	patches  *metrics.CounterVec
	unplaced *metrics.Gauge
}

func newMetrics(reg metrics.KubeRegistry) *routerMetrics {
	if reg == nil {
		return nil
	}
	m := &routerMetrics{
		patches: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: "csi_node_router", Name: "label_patches_total",
			Help: "PATCHes of the node label, by resource (persistentvolumeclaims, persistentvolumes) and result (success, conflict, error)."},
			[]string{"resource", "result"}),
		unplaced: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: "csi_node_router", Name: "unplaced_volumes",
			Help: "PVs of the driver without the node label whose node affinity is satisfied by no node or by more than one: no node's instance sees them with selection by label."}),
	}
	reg.MustRegister(m.patches, m.unplaced)
	return m
}

func (m *routerMetrics) observePatch(resource, result string) {
	if m != nil {
		m.patches.WithLabelValues(resource, result).Inc()
	}
}

func (m *routerMetrics) setUnplaced(n int) {
	if m != nil {
		m.unplaced.Set(float64(n))
	}
}
