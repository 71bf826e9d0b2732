package lab

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadTimeout bounds the waits of the workload helpers.
const WorkloadTimeout = 120 * time.Second

// NamespaceWithClass creates a namespace and a WaitForFirstConsumer class of
// the mock driver, both named name, and waits for the namespace's default
// ServiceAccount.
func (l *Lab) NamespaceWithClass(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	c := l.Cluster.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: DriverName, VolumeBindingMode: &mode,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("default ServiceAccount of %s: %v", name, err)
	}
}

// ClaimAndPod creates a claim of size bytes of class and a pod named like it
// that uses it and prefers preferNode (when not empty).
func (l *Lab) ClaimAndPod(t testing.TB, ctx context.Context, ns, class, name string, size int64, preferNode string) {
	t.Helper()
	l.ClaimAndPodPreferring(t, ctx, ns, class, name, size, "kubernetes.io/hostname", preferNode)
}

// PodOption changes a pod of ClaimAndPodPreferring before it is created.
type PodOption func(*v1.Pod)

// ScheduledBy has the pod scheduled by the named scheduler profile.
func ScheduledBy(scheduler string) PodOption {
	return func(p *v1.Pod) { p.Spec.SchedulerName = scheduler }
}

// ClaimAndPodPreferring is ClaimAndPod with a preference (weight 100) for
// nodes labelled key=value (none when value is empty).
func (l *Lab) ClaimAndPodPreferring(t testing.TB, ctx context.Context, ns, class, name string, size int64, key, value string, opts ...PodOption) {
	t.Helper()
	c := l.Cluster.Client
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.PodPreferring(t, ctx, ns, name, key, value, opts...)
}

// PodPreferring creates a pod named like the claim it uses, with a
// preference (weight 100) for nodes labelled key=value (none when value is
// empty).
func (l *Lab) PodPreferring(t testing.TB, ctx context.Context, ns, name, key, value string, opts ...PodOption) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
	}}
	if value != "" {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
			Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: key, Operator: v1.NodeSelectorOpIn, Values: []string{value}}}}}}}}
	}
	for _, o := range opts {
		o(pod)
	}
	if _, err := l.Cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// WaitPlaced waits until the claim name is Bound and its pod on a node, and
// returns the node and the zone of the claim's volume.
func (l *Lab) WaitPlaced(t testing.TB, ctx context.Context, ns, name string) (node, zone string) {
	t.Helper()
	err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		var ok bool
		node, zone, ok = l.placed(ctx, ns, name)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s/%s not placed: %v", ns, name, err)
	}
	return node, zone
}

// placed reports whether the claim name is Bound and its pod (of the same
// name) on a node, with the node and the zone of the claim's volume.
func (l *Lab) placed(ctx context.Context, ns, name string) (node, zone string, ok bool) {
	c := l.Cluster.Client
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName == "" {
		return "", "", false
	}
	pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != v1.ClaimBound {
		return "", "", false
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", "", false
	}
	if pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == ZoneKey {
					zone = e.Values[0]
				}
			}
		}
	}
	return pod.Spec.NodeName, zone, true
}
