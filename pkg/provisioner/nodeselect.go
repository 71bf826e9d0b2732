package provisioner

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelselection "k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// Selection by label (docs/node-deployment.md "Selection by label"): with
// NodeDeployment.LabelSelection the instance's claim and PV informers list
// and watch only the objects labelled nodelabel.Key with the node's value
// (and, for claims with ImmediateBinding, the driver's pool value), so the
// API server sends an instance nothing of other nodes. Instances write the
// label where they decide the node, in both modes (so that a cluster
// switched to selection by label finds the volumes of its instances
// labelled already):
//
//   - the PV an instance creates carries its node's value (buildPV);
//   - the node claimer's Update that takes an immediate-binding claim sets
//     the node's value together with the selected node;
//   - a hand-back that removes the selected node sets the pool value on a
//     claim of an immediate-binding class and removes the label otherwise.
//
// csi-node-router writes it everywhere else: claims the scheduler placed,
// unselected immediate-binding claims, and what was made before.

// nodeValue is the node's value of nodelabel.Key.
func (n *NodeDeployment) nodeValue() string { return nodelabel.NodeValue(n.NodeName) }

// claimSelector selects the claims of this node and, with ImmediateBinding,
// those of the driver's pool.
func (n *NodeDeployment) claimSelector(driver string) string {
	values := []string{n.nodeValue()}
	if n.ImmediateBinding {
		values = append(values, nodelabel.PoolValue(driver))
	}
	r, err := labels.NewRequirement(nodelabel.Key, labelselection.In, values)
	if err != nil {
		// Values are valid label values by construction.
		panic(err)
	}
	return labels.NewSelector().Add(*r).String()
}

// volumeSelector selects the PVs of this node.
func (n *NodeDeployment) volumeSelector() string {
	return labels.SelectorFromSet(labels.Set{nodelabel.Key: n.nodeValue()}).String()
}

// registerScopedInformers makes the factory's claim and PV informers the
// label-selected ones, before anything asks the factory for them: every
// consumer of the factory's claims and PVs (the library, the in-flight
// record keeper, the node claimer, data sources and their protection) then
// reads the node's objects only, and no informer of all claims or all PVs
// runs.
func (n *NodeDeployment) registerScopedInformers(factory informers.SharedInformerFactory, driver string) {
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	claims := n.claimSelector(driver)
	factory.InformerFor(&v1.PersistentVolumeClaim{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPersistentVolumeClaimInformer(c, metav1.NamespaceAll, resync, indexers,
			func(o *metav1.ListOptions) { o.LabelSelector = claims })
	})
	volumes := n.volumeSelector()
	factory.InformerFor(&v1.PersistentVolume{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPersistentVolumeInformer(c, resync, indexers,
			func(o *metav1.ListOptions) { o.LabelSelector = volumes })
	})
}

// labelVolume sets the node's value on a PV the instance builds.
func (n *NodeDeployment) labelVolume(pv *v1.PersistentVolume) {
	if n == nil {
		return
	}
	if pv.Labels == nil {
		pv.Labels = map[string]string{}
	}
	pv.Labels[nodelabel.Key] = n.nodeValue()
}

// handBackLabel is the label value a claim of class gets when it is handed
// back: the pool's for an immediate-binding class, none ("") otherwise.
func handBackLabel(driver string, class *storagev1.StorageClass) string {
	if class != nil && (class.VolumeBindingMode == nil || *class.VolumeBindingMode == storagev1.VolumeBindingImmediate) {
		return nodelabel.PoolValue(driver)
	}
	return ""
}

// registerCacheMetrics exports how many claims and PVs the controller's
// informers hold (csi_topology_provisioner_cached_claims and
// _cached_volumes) and how many watch events they received
// (csi_topology_provisioner_cache_events_total{resource}): with selection by
// label a node's instance holds its own node's only, whatever the size of
// the cluster, and receives nothing when other nodes' claims and PVs
// change.
func registerCacheMetrics(reg metrics.KubeRegistry, claims, volumes cache.SharedIndexInformer) error {
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

// selectsAfterWrite returns whether a claim the library writes to its
// store is still in the node's selection as the API server has it: its
// selected node is this node, or it has none and a hand-back put it in the
// driver's pool (an immediate-binding class, with ImmediateBinding). The
// library's only such write is the claim it handed back (selected node
// removed), whose labels are the ones from before the hand-back.
func (n *NodeDeployment) selectsAfterWrite(driver string, classes storagelisters.StorageClassLister) func(obj any) bool {
	return func(obj any) bool {
		claim, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok {
			return true
		}
		if node, ok := claim.Annotations[annSelectedNode]; ok {
			return node == n.NodeName
		}
		if !n.ImmediateBinding {
			return false
		}
		class, err := classes.Get(ptr.Deref(claim.Spec.StorageClassName, ""))
		if err != nil {
			return false
		}
		return handBackLabel(driver, class) != ""
	}
}
