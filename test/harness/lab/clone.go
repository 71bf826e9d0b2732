package lab

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticSourceClaim creates a claim of class bound to a statically created
// PV of the mock driver (reclaim policy Retain, volume handle "static-"+ns+
// "-"+name) whose node affinity is zone, both named name (the PV "ns-name"),
// and waits until the claim is Bound: a clone's source in a known zone.
func (l *Lab) StaticSourceClaim(t testing.TB, ctx context.Context, ns, class, name, zone string, size int64) {
	t.Helper()
	c := l.Cluster.Client
	q := *resource.NewQuantity(size, resource.BinarySI)
	pvName := ns + "-" + name
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: q},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: DriverName, VolumeHandle: "static-" + ns + "-" + name}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{zone}}}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: pvName,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == v1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("source claim %s/%s not bound: %v", ns, name, err)
	}
}

// CloneClaimAndPod creates a claim of class cloning the claim source (its
// dataSource and dataSourceRef) and a pod named like it that uses it and
// prefers (weight 100) nodes of zone preferZone.
func (l *Lab) CloneClaimAndPod(t testing.TB, ctx context.Context, ns, class, name, source, preferZone string, size int64) {
	t.Helper()
	c := l.Cluster.Client
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class,
			AccessModes:   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			DataSource:    &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source},
			DataSourceRef: &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: source},
			Resources:     v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
			Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{preferZone}}}}}}}},
	}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// WaitSelectedNode waits until the claim carries the scheduler's
// volume.kubernetes.io/selected-node annotation and returns its value.
func (l *Lab) WaitSelectedNode(t testing.TB, ctx context.Context, ns, name string) string {
	t.Helper()
	var node string
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := l.Cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = pvc.Annotations[AnnSelectedNode]
		return node != "", nil
	}); err != nil {
		t.Fatalf("claim %s/%s never selected for a node: %v", ns, name, err)
	}
	return node
}
