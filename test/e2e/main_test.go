package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

const (
	zoneKey    = lab.ZoneKey
	rackKey    = lab.RackKey
	driverName = lab.DriverName
	gi         = int64(1) << 30
	timeout    = 90 * time.Second
)

var (
	env    *lab.Lab
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{}, func(ctx context.Context, c *controlplane.Cluster) error {
		var err error
		env, err = lab.Setup(ctx, c, lab.Config{Zones: []string{"z1", "z2", "z3"}, Racks: []string{"r1", "r2"}, NodesPerZone: 2, CapacityBytes: 100 * gi})
		client = c.Client
		return err
	}))
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	name := "e2e-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("default ServiceAccount in %s: %v", name, err)
	}
	return ctx, name
}

type classOpts struct {
	immediate bool
	zones     []string
	terms     []v1.TopologySelectorTerm
	reclaim   v1.PersistentVolumeReclaimPolicy
}

// newClass creates a StorageClass of the mock driver for one test.
func newClass(t *testing.T, ctx context.Context, name string, o classOpts) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if o.immediate {
		mode = storagev1.VolumeBindingImmediate
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if o.reclaim != "" {
		reclaim = o.reclaim
	}
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driverName,
		VolumeBindingMode: &mode, ReclaimPolicy: &reclaim,
	}
	if len(o.zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: zoneKey, Values: o.zones}}}}
	}
	sc.AllowedTopologies = append(sc.AllowedTopologies, o.terms...)
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return name
}

func newPVC(t *testing.T, ctx context.Context, ns, name, class string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type podOpts struct {
	claims       []string
	nodeSelector map[string]string
	// antiAffinityLabel spreads pods with the same app label over zones.
	antiAffinityLabel string
	// notInZone keeps the pod out of a zone (required node affinity).
	notInZone string
}

func newPod(t *testing.T, ctx context.Context, ns, name string, o podOpts) {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			Containers:   []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			NodeSelector: o.nodeSelector,
		},
	}
	for i, c := range o.claims {
		vol := fmt.Sprintf("v%d", i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: vol, MountPath: "/" + vol})
	}
	if o.antiAffinityLabel != "" {
		pod.Labels = map[string]string{"app": o.antiAffinityLabel}
		pod.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": o.antiAffinityLabel}},
				TopologyKey:   zoneKey,
			}},
		}}
	}
	if o.notInZone != "" {
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &v1.Affinity{}
		}
		pod.Spec.Affinity.NodeAffinity = &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: zoneKey, Operator: v1.NodeSelectorOpNotIn, Values: []string{o.notInZone}}}}},
		}}
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits until the claim is Bound and returns its PV.
func waitBound(t *testing.T, ctx context.Context, ns, name string) *v1.PersistentVolume {
	t.Helper()
	var pv *v1.PersistentVolume
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimBound {
			return false, nil
		}
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("claim %s/%s not bound: %v; events: %s", ns, name, err, eventsOf(ctx, ns, "PersistentVolumeClaim", name))
	}
	return pv
}

// waitPodNode waits until the pod is bound to a node and returns the node.
func waitPodNode(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	var node string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = pod.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not scheduled: %v; events: %s", ns, name, err, eventsOf(ctx, ns, "Pod", name))
	}
	return node
}

// affinityZones returns the zones a PV's node affinity allows.
func affinityZones(pv *v1.PersistentVolume) []string {
	var zones []string
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == zoneKey {
				zones = append(zones, e.Values...)
			}
		}
	}
	return zones
}

// volumeOf returns the mock driver's volume behind a PV.
func volumeOf(t *testing.T, ctx context.Context, pv *v1.PersistentVolume) state.Volume {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == pv.Spec.CSI.VolumeHandle {
			return v
		}
	}
	t.Fatalf("driver has no volume %s for PV %s", pv.Spec.CSI.VolumeHandle, pv.Name)
	return state.Volume{}
}

// namespaceVolumes counts the driver's volumes of the claims of namespace ns
// (a volume's name carries its claim's UID), so that volumes of other tests,
// still being deleted, do not count.
func namespaceVolumes(ctx context.Context, ns string) (int, error) {
	claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vols {
		for _, c := range claims.Items {
			if strings.HasSuffix(v.Name, string(c.UID)) {
				n++
				break
			}
		}
	}
	return n, nil
}

// mustNamespaceVolumes is namespaceVolumes that fails the test on error.
func mustNamespaceVolumes(t *testing.T, ctx context.Context, ns string) int {
	t.Helper()
	n, err := namespaceVolumes(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventsOf returns the events of an object as one string.
func eventsOf(ctx context.Context, ns, kind, name string) string {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			fmt.Fprintf(&b, "\n  %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

func deletePod(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	zero := int64(0)
	if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod %s not deleted: %v", name, err)
	}
}

// waitExactlyOnce waits until the claims data-0 .. data-<n-1> of ns are
// Bound, each to its own volume, and checks the driver has exactly n more
// volumes than before: every claim provisioned once, nothing leaked.
func waitExactlyOnce(t *testing.T, ctx context.Context, ns string, n, before int) {
	t.Helper()
	handles := map[string]bool{}
	for i := 0; i < n; i++ {
		pv := waitBound(t, ctx, ns, fmt.Sprintf("data-%d", i))
		if handles[pv.Spec.CSI.VolumeHandle] {
			t.Errorf("volume %s bound twice", pv.Spec.CSI.VolumeHandle)
		}
		handles[pv.Spec.CSI.VolumeHandle] = true
	}
	after, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != before+n {
		t.Errorf("driver volumes %d -> %d, want exactly %d new (no duplicates, no orphans)", before, len(after), n)
	}
}
