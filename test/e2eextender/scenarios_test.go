package e2eextender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

const timeout = 90 * time.Second

func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ns := strings.ToLower("x-" + t.Name())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns}, Provisioner: lab.DriverName, VolumeBindingMode: &mode,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	return ctx, ns
}

// claimAndPod creates a 1 Gi claim of the namespace's class and a pod using
// it that prefers node.
func claimAndPod(t *testing.T, ctx context.Context, ns, name, preferNode string) {
	t.Helper()
	class := ns
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
			Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{preferNode}}}}}}}},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitBoundNode(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	var node string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName == "" {
			return false, nil
		}
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		node = pod.Spec.NodeName
		return err == nil && pvc.Status.Phase == v1.ClaimBound, nil
	})
	if err != nil {
		t.Fatalf("%s/%s not bound and placed: %v", ns, name, err)
	}
	return node
}

// Issue 5, scenario 4: a stock kube-scheduler with our extender keeps pods
// off a node where the driver is not registered.
func TestExtenderFiltersNodeWithoutDriver(t *testing.T) {
	ctx, ns := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-bare", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), "node-bare", metav1.DeleteOptions{})
	})
	for i := 0; i < 3; i++ {
		claimAndPod(t, ctx, ns, fmt.Sprintf("app-%d", i), "node-bare")
	}
	for i := 0; i < 3; i++ {
		if node := waitBoundNode(t, ctx, ns, fmt.Sprintf("app-%d", i)); node == "node-bare" {
			t.Errorf("app-%d placed on the node without the driver", i)
		}
	}
}

// Issue 5, scenario 5: with `ignorable: true`, pods are still scheduled
// while the extender is down.
func TestExtenderDownIgnorable(t *testing.T) {
	ctx, ns := setup(t)
	extender.Stop(15 * time.Second)
	t.Cleanup(func() {
		if err := startExtender(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("restarting the extender: %v", err)
		}
	})
	claimAndPod(t, ctx, ns, "app", "node-z2-a")
	waitBoundNode(t, ctx, ns, "app")
}
