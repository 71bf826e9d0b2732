package capacity

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

const (
	metricsSubsystem = "csi_topology_provisioner"
	resultSuccess    = "success"
	resultError      = "error"
)

// Metrics are the publisher's own metrics: the objects it publishes and
// its writes. A nil *Metrics records nothing.
type Metrics struct {
	objects *metrics.Gauge
	writes  *metrics.CounterVec
}

// NewMetrics registers the publisher's metrics in reg. The provisioner
// registers them with its own (provisioner.NewMetrics), whether or not it
// publishes capacity, and hands them to the publisher (SetMetrics).
func NewMetrics(reg metrics.KubeRegistry) *Metrics {
	m := &Metrics{
		objects: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "capacity_objects",
			Help: "CSIStorageCapacity objects this provisioner publishes."}),
		writes: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "capacity_updates_total",
			Help: "CSIStorageCapacity creates, updates and deletes by result."},
			[]string{"operation", "result"}),
	}
	reg.MustRegister(m.objects, m.writes)
	return m
}

// SetObjects records the number of objects after a full sync.
func (m *Metrics) SetObjects(n int) {
	if m != nil {
		m.objects.Set(float64(n))
	}
}

// ObserveWrite records a create, update or delete (op) of an object and
// whether it failed.
func (m *Metrics) ObserveWrite(op string, err error) {
	if m == nil {
		return
	}
	result := resultSuccess
	if err != nil {
		result = resultError
	}
	m.writes.WithLabelValues(op, result).Inc()
}

// The CSIStorageCapacity gauges of upstream's external-provisioner, with
// its names, help and (no) labels.
var (
	capacityGoalDesc = metrics.NewDesc("csistoragecapacities_desired_goal",
		"Number of CSIStorageCapacity objects that are supposed to be managed automatically.",
		nil, nil, metrics.ALPHA, "")
	capacityCurrentDesc = metrics.NewDesc("csistoragecapacities_desired_current",
		"Number of CSIStorageCapacity objects that exist and are supposed to be managed automatically.",
		nil, nil, metrics.ALPHA, "")
	capacityObsoleteDesc = metrics.NewDesc("csistoragecapacities_obsolete",
		"Number of CSIStorageCapacity objects that exist and will be deleted automatically. Objects that exist and may need an update are not considered obsolete and therefore not included in this value.",
		nil, nil, metrics.ALPHA, "")
)

// collector computes the csistoragecapacities_* gauges from a
// Publisher when they are scraped, as upstream does: nothing to
// keep in step between syncs.
type collector struct {
	metrics.BaseStableCollector
	p *Publisher
}

var _ metrics.StableCollector = &collector{}

// NewCollector returns the collector of p's csistoragecapacities_*
// gauges, for KubeRegistry.CustomMustRegister.
func NewCollector(p *Publisher) metrics.StableCollector {
	return &collector{p: p}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- capacityGoalDesc
	ch <- capacityCurrentDesc
	ch <- capacityObsoleteDesc
}

// CollectWithStability implements metrics.StableCollector.
func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	n, err := c.p.objectCounts()
	if err != nil {
		// The listers read informer caches: this does not happen. A
		// gauge left out beats a false zero.
		return
	}
	ch <- metrics.NewLazyConstMetric(capacityGoalDesc, metrics.GaugeValue, float64(n.goal))
	ch <- metrics.NewLazyConstMetric(capacityCurrentDesc, metrics.GaugeValue, float64(n.current))
	ch <- metrics.NewLazyConstMetric(capacityObsoleteDesc, metrics.GaugeValue, float64(n.obsolete))
}

// capacityCounts are the publisher's objects as a full Sync would see them.
type capacityCounts struct {
	// goal is the number of objects wanted: one per (known segment,
	// delayed-binding class of the driver).
	goal int
	// current is the number of wanted objects that exist.
	current int
	// obsolete is the number of existing objects of this publisher that
	// are not wanted (a full Sync deletes them).
	obsolete int
}

// objectCounts counts the wanted, existing and obsolete objects from the
// topology index and the listers, with the rules of sync.
func (p *Publisher) objectCounts() (capacityCounts, error) {
	var n capacityCounts
	classes, err := p.classes.List(labels.Everything())
	if err != nil {
		return n, err
	}
	wanted := map[capacityKey]bool{}
	for _, keys := range p.index.KeySets() {
		for _, seg := range p.index.Segments(keys) {
			for _, c := range classes {
				if p.publishesFor(c) {
					wanted[capacityKey{seg.String(), c.Name}] = true
				}
			}
		}
	}
	n.goal = len(wanted)
	existing, err := p.capacities.CSIStorageCapacities(p.cfg.Namespace).List(p.cfg.selector())
	if err != nil {
		return n, err
	}
	found := map[capacityKey]bool{}
	for _, obj := range existing {
		var sel map[string]string
		if obj.NodeTopology != nil {
			sel = obj.NodeTopology.MatchLabels
		}
		key := capacityKey{topology.Segment(sel).String(), obj.StorageClassName}
		if wanted[key] {
			found[key] = true
		} else {
			n.obsolete++
		}
	}
	n.current = len(found)
	return n, nil
}

// publishesFor tells whether the publisher keeps objects for class c: a
// class of its driver with delayed binding.
func (p *Publisher) publishesFor(c *storagev1.StorageClass) bool {
	return c.Provisioner == p.cfg.DriverName && c.VolumeBindingMode != nil && *c.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}
