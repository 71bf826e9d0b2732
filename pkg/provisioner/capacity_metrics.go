package provisioner

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

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

// capacityCollector computes the csistoragecapacities_* gauges from a
// CapacityPublisher when they are scraped, as upstream does: nothing to
// keep in step between syncs.
type capacityCollector struct {
	metrics.BaseStableCollector
	p *CapacityPublisher
}

var _ metrics.StableCollector = &capacityCollector{}

// newCapacityCollector returns the collector of p's gauges, for
// KubeRegistry.CustomMustRegister.
func newCapacityCollector(p *CapacityPublisher) *capacityCollector {
	return &capacityCollector{p: p}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *capacityCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- capacityGoalDesc
	ch <- capacityCurrentDesc
	ch <- capacityObsoleteDesc
}

// CollectWithStability implements metrics.StableCollector.
func (c *capacityCollector) CollectWithStability(ch chan<- metrics.Metric) {
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
func (p *CapacityPublisher) objectCounts() (capacityCounts, error) {
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
func (p *CapacityPublisher) publishesFor(c *storagev1.StorageClass) bool {
	return c.Provisioner == p.cfg.DriverName && c.VolumeBindingMode != nil && *c.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}
