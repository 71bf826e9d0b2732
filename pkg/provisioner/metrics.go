package provisioner

import (
	"time"

	"k8s.io/component-base/metrics"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/fullsegments"
)

const metricsSubsystem = "csi_topology_provisioner"

// Operation results, the "result" label.
const (
	resultSuccess    = "success"
	resultReschedule = "reschedule"
	resultBackground = "in_background"
	resultRetry      = "retry"
	resultError      = "error"
)

// Metrics are the provisioner's Prometheus metrics (CSI calls are timed by
// csi-lib-utils' metrics manager on the same registry), with those of
// capacity publishing (Capacity) and of full-segment holds. A nil *Metrics records nothing.
type Metrics struct {
	operations *metrics.CounterVec
	durations  *metrics.HistogramVec
	reschedule *metrics.CounterVec
	selected   *metrics.HistogramVec
	fullSegs   *fullsegments.Metrics
	capacity   *capacity.Metrics
}

// NewMetrics registers the provisioner's metrics in reg.
func NewMetrics(reg metrics.KubeRegistry) *Metrics {
	m := &Metrics{
		operations: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "operations_total",
			Help: "Provision and delete operations by storage class and result (success, reschedule, in_background, retry, error)."},
			[]string{"operation", "storage_class", "result"}),
		durations: metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: metricsSubsystem, Name: "operation_duration_seconds",
			Help:    "Duration of provision and delete operations by storage class and result.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}},
			[]string{"operation", "storage_class", "result"}),
		reschedule: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "reschedules_total",
			Help: "Claims handed back to the scheduler (selected-node removed), by reason."},
			[]string{"reason"}),
		selected: metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: metricsSubsystem, Name: "selected_node_to_pv_seconds",
			Help:    "Time from when the provisioner first saw a claim's selected-node annotation to its PV being returned for creation, by storage class.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}},
			[]string{"storage_class"}),
	}
	reg.MustRegister(m.operations, m.durations, m.reschedule, m.selected)
	m.fullSegs = fullsegments.NewMetrics(reg)
	// Registered whether or not capacity is published: the gauge reads 0
	// without it.
	m.capacity = capacity.NewMetrics(reg)
	return m
}

// Capacity returns the metrics of capacity publishing, registered with
// the provisioner's (nil for a nil m: they record nothing).
func (m *Metrics) Capacity() *capacity.Metrics {
	if m == nil {
		return nil
	}
	return m.capacity
}

func provisionResult(state controller.ProvisioningState, err error) string {
	switch {
	case err == nil:
		return resultSuccess
	case state == controller.ProvisioningReschedule:
		return resultReschedule
	case state == controller.ProvisioningInBackground:
		return resultBackground
	case state == controller.ProvisioningNoChange:
		return resultRetry
	default:
		return resultError
	}
}

func (m *Metrics) observeOperation(op, class, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.operations.WithLabelValues(op, class, result).Inc()
	m.durations.WithLabelValues(op, class, result).Observe(d.Seconds())
}

func (m *Metrics) observeReschedule(reason RescheduleReason) {
	if m != nil {
		m.reschedule.WithLabelValues(string(reason)).Inc()
	}
}

func (m *Metrics) observeSelectedToPV(class string, d time.Duration) {
	if m != nil {
		m.selected.WithLabelValues(class).Observe(d.Seconds())
	}
}

// fullSegments returns the gauge of full-segment holds (nil for a nil m).
func (m *Metrics) fullSegments() *fullsegments.Metrics {
	if m == nil {
		return nil
	}
	return m.fullSegs
}
