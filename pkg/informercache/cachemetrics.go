package informercache

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
)

// metricsSubsystem is the provisioner's, so the metrics keep their names.
const metricsSubsystem = "csi_topology_provisioner"

// RegisterMetrics exports how many claims and PVs the controller's
// informers hold (csi_topology_provisioner_cached_claims and
// _cached_volumes) and how many watch events they received
// (csi_topology_provisioner_cache_events_total{resource}): with selection by
// label a node's instance holds its own node's only, whatever the size of
// the cluster, and receives nothing when other nodes' claims and PVs
// change.
func RegisterMetrics(reg metrics.KubeRegistry, claims, volumes cache.SharedIndexInformer) error {
	events := metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "cache_events_total",
		Help: "Watch events (adds, updates, deletes; the initial list's adds included, resyncs not) the provisioner's informer of claims or volumes received."},
		[]string{"resource"})
	reg.MustRegister(events)
	for what, inf := range map[string]cache.SharedIndexInformer{"claims": claims, "volumes": volumes} {
		store := inf.GetStore()
		reg.RawMustRegister(metrics.NewGaugeFunc(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "cached_" + what,
			Help: "Objects the provisioner's informer of " + what + " holds (with node deployment's selection by label, its own node's and the pool's only)."},
			func() float64 { return float64(len(store.ListKeys())) }))
		if _, err := inf.AddEventHandler(cacheEventCounter(events.WithLabelValues(what))); err != nil {
			return fmt.Errorf("counting the events of %s: %w", what, err)
		}
	}
	return nil
}

// cacheEventCounter counts an informer's events, but not its resyncs (an
// update without a new resourceVersion: nothing came from the API server).
func cacheEventCounter(c metrics.CounterMetric) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.Inc() },
		UpdateFunc: func(oldObj, newObj any) {
			o, errOld := meta.Accessor(oldObj)
			n, errNew := meta.Accessor(newObj)
			if errOld != nil || errNew != nil || o.GetResourceVersion() != n.GetResourceVersion() {
				c.Inc()
			}
		},
		DeleteFunc: func(any) { c.Inc() },
	}
}
