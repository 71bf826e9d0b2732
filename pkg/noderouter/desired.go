package noderouter

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// annSelectedNode is where the scheduler (or the node claimer of an
// immediate-binding claim) records the node of a claim.
const annSelectedNode = storagehelpers.AnnSelectedNode

// Annotations kube-controller-manager's PV controller puts on a claim it
// leaves to an external provisioner (the beta one for older clusters).
const (
	annStorageProvisioner     = storagehelpers.AnnStorageProvisioner
	annBetaStorageProvisioner = storagehelpers.AnnBetaStorageProvisioner
)

// want is the label a claim or PV should carry: keep means leave it as it
// is (no opinion); otherwise value, where "" is no label.
type want struct {
	keep  bool
	value string
}

// claimLabel returns the label a claim of driver should carry, given its
// class (nil: not in the cache):
//
//   - not of the driver's classes: left alone;
//   - without a volume and not yet left to the driver by the PV controller
//     (its storage-provisioner annotation): left alone for now. The PV
//     controller writes that annotation right after the claim is created
//     (immediate binding) or selected (delayed binding); a label PATCH in
//     between would make its Update conflict (a ProvisioningFailed Event
//     "Error saving claim" and a retry). No instance acts on the claim
//     before the annotation anyway;
//   - selected for a node: that node's value (bound or not: the node of its
//     volume);
//   - bound without a selected node (a pre-provisioned PV): left alone;
//   - immediate-binding without a selected node: the driver's pool value;
//   - waiting for its first consumer without a selected node: no label.
func claimLabel(driver string, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) want {
	if class == nil || class.Provisioner != driver {
		return want{keep: true}
	}
	if claim.Spec.VolumeName == "" && claim.Annotations[annStorageProvisioner] != driver && claim.Annotations[annBetaStorageProvisioner] != driver {
		return want{keep: true}
	}
	if node := claim.Annotations[annSelectedNode]; node != "" {
		return want{value: nodelabel.NodeValue(node)}
	}
	if claim.Spec.VolumeName != "" {
		return want{keep: true}
	}
	if class.VolumeBindingMode == nil || *class.VolumeBindingMode == storagev1.VolumeBindingImmediate {
		return want{value: nodelabel.PoolValue(driver)}
	}
	return want{}
}

// volumeNodes returns the nodes whose labels satisfy a PV's required node
// affinity, at most two (more than one is already too many); a PV without
// one is reachable from every node and gets none.
func volumeNodes(pv *v1.PersistentVolume, candidates []*metav1.PartialObjectMetadata) []string {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) == 0 {
		return nil
	}
	var out []string
	for _, n := range candidates {
		node := &v1.Node{ObjectMeta: n.ObjectMeta}
		if ok, err := corev1helpers.MatchNodeSelectorTerms(node, a.Required); err == nil && ok {
			out = append(out, n.Name)
			if len(out) > 1 {
				return out
			}
		}
	}
	return out
}

// hostnames returns the values of kubernetes.io/hostname a PV's node
// affinity names when each of its terms requires that label In some
// values: only the nodes with one of them can satisfy it. ok is false when
// some term does not narrow it so (every node must then be checked).
func hostnames(pv *v1.PersistentVolume) (names []string, ok bool) {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) == 0 {
		return nil, false
	}
	for _, t := range a.Required.NodeSelectorTerms {
		found := false
		for _, e := range t.MatchExpressions {
			if e.Key == v1.LabelHostname && e.Operator == v1.NodeSelectorOpIn {
				names, found = append(names, e.Values...), true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return names, true
}
