package nodedeploy

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"
)

// Transform returns the cache transform of a node's instance: base (the
// provisioner's own trimming), and besides, the claims and PVs of other
// nodes are cached as stubs with what the instance's consumers read of
// them. Every node's instance caches every claim and PV of the cluster
// (without LabelSelection), so the stubs are what they cost it.
//
//   - A claim selected for another node, or bound without being this
//     node's, keeps the selected node, the class, the bound volume, the
//     data source (the source protection counts pending clones
//     cluster-wide), the finalizers and the deletion mark. An update that
//     selects this node brings the whole claim again.
//   - A PV whose node affinity does not admit this node keeps its driver
//     and handle, claim reference, class, reclaim policy, volume mode,
//     node affinity, phase, finalizers and deletion mark (what a clone or
//     restore reads of its source's PV).
func (n *Config) Transform(base cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		obj, err := base(obj)
		if pv, ok := obj.(*v1.PersistentVolume); ok && err == nil && !n.OwnsVolume(pv) {
			return pvStub(pv), nil
		}
		c, ok := obj.(*v1.PersistentVolumeClaim)
		if err != nil || !ok {
			return obj, err
		}
		return n.claimStub(c), nil
	}
}

// claimStub returns c itself when it is this node's or may become so
// (pending without a node), else its stub.
func (n *Config) claimStub(c *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	selected := c.Annotations[volume.AnnSelectedNode]
	if selected == n.NodeName || (selected == "" && c.Spec.VolumeName == "") {
		return c
	}
	stub := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion,
			DeletionTimestamp: c.DeletionTimestamp, Finalizers: c.Finalizers},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: c.Spec.StorageClassName, VolumeName: c.Spec.VolumeName,
			DataSource: c.Spec.DataSource, DataSourceRef: c.Spec.DataSourceRef},
		Status: v1.PersistentVolumeClaimStatus{Phase: c.Status.Phase},
	}
	if selected != "" {
		stub.Annotations = map[string]string{volume.AnnSelectedNode: selected}
	}
	return stub
}

func pvStub(pv *v1.PersistentVolume) *v1.PersistentVolume {
	stub := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion,
			DeletionTimestamp: pv.DeletionTimestamp, Finalizers: pv.Finalizers},
		Spec: v1.PersistentVolumeSpec{ClaimRef: pv.Spec.ClaimRef, StorageClassName: pv.Spec.StorageClassName,
			PersistentVolumeReclaimPolicy: pv.Spec.PersistentVolumeReclaimPolicy, VolumeMode: pv.Spec.VolumeMode,
			NodeAffinity: pv.Spec.NodeAffinity},
		Status: v1.PersistentVolumeStatus{Phase: pv.Status.Phase},
	}
	if pv.Spec.CSI != nil {
		stub.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: pv.Spec.CSI.Driver, VolumeHandle: pv.Spec.CSI.VolumeHandle}
	}
	return stub
}
