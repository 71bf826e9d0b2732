package nodedeploy

import (
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelselection "k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// Selection by label (docs/node-deployment.md "Selection by label"): with
// Config.LabelSelection the instance's claim and PV informers list and
// watch only the objects labelled nodelabel.Key with the node's value
// (and, for claims with ImmediateBinding, the driver's pool value), so the
// API server sends an instance nothing of other nodes. Instances write the
// label where they decide the node, in both modes (so that a cluster
// switched to selection by label finds the volumes of its instances
// labelled already):
//
//   - the PV an instance creates carries its node's value (LabelVolume);
//   - the Claimer's Update that takes an immediate-binding claim sets the
//     node's value together with the selected node;
//   - a hand-back that removes the selected node sets the pool value on a
//     claim of an immediate-binding class and removes the label otherwise
//     (HandBackLabel).
//
// csi-node-router writes it everywhere else: claims the scheduler placed,
// unselected immediate-binding claims, and what was made before.

// NodeValue is the node's value of nodelabel.Key.
func (n *Config) NodeValue() string { return nodelabel.NodeValue(n.NodeName) }

// claimSelector selects the claims of this node and, with ImmediateBinding,
// those of the driver's pool.
func (n *Config) claimSelector(driver string) string {
	values := []string{n.NodeValue()}
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
func (n *Config) volumeSelector() string {
	return labels.SelectorFromSet(labels.Set{nodelabel.Key: n.NodeValue()}).String()
}

// ScopeInformers makes the factory's claim and PV informers the
// label-selected ones (LabelSelection), before anything asks the factory
// for them: every consumer of the factory's claims and PVs (the library,
// the in-flight record keeper, the Claimer, data sources and their
// protection) then reads the node's objects only, and no informer of all
// claims or all PVs runs.
func (n *Config) ScopeInformers(factory informers.SharedInformerFactory, driver string) {
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

// LabelVolume sets the node's value on a PV the instance builds (nothing
// without node deployment).
func (n *Config) LabelVolume(pv *v1.PersistentVolume) {
	if n == nil {
		return
	}
	if pv.Labels == nil {
		pv.Labels = map[string]string{}
	}
	pv.Labels[nodelabel.Key] = n.NodeValue()
}

// HandBackLabel is the label value a claim of class gets when it is handed
// back: the pool's for an immediate-binding class, none ("") otherwise.
func HandBackLabel(driver string, class *storagev1.StorageClass) string {
	if class != nil && (class.VolumeBindingMode == nil || *class.VolumeBindingMode == storagev1.VolumeBindingImmediate) {
		return nodelabel.PoolValue(driver)
	}
	return ""
}

// KeepAfterWrite returns whether a claim the library writes to its store
// is still in the node's selection as the API server has it: its selected
// node is this node, or it has none and a hand-back put it in the driver's
// pool (an immediate-binding class, with ImmediateBinding). The library's
// only such write is the claim it handed back (selected node removed),
// whose labels are the ones from before the hand-back.
func (n *Config) KeepAfterWrite(driver string, classes storagelisters.StorageClassLister) func(obj any) bool {
	return func(obj any) bool {
		claim, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok {
			return true
		}
		if node, ok := claim.Annotations[volume.AnnSelectedNode]; ok {
			return node == n.NodeName
		}
		if !n.ImmediateBinding {
			return false
		}
		class, err := classes.Get(ptr.Deref(claim.Spec.StorageClassName, ""))
		if err != nil {
			return false
		}
		return HandBackLabel(driver, class) != ""
	}
}
