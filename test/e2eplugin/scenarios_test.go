package e2eplugin

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

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

const timeout = 120 * time.Second

// setup creates a namespace and a WaitForFirstConsumer class for one test.
func setup(t *testing.T) (context.Context, string, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ns := strings.ToLower("p-" + t.Name())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns}, Provisioner: lab.DriverName, VolumeBindingMode: &mode,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ctx, ns, ns
}

// claimAndPod creates a claim of size and a pod using it that prefers node
// (when not empty).
func claimAndPod(t *testing.T, ctx context.Context, ns, class, name string, size int64, preferNode string) {
	t.Helper()
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
	}}
	if preferNode != "" {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
			Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{preferNode}}}}}}}}
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPlaced waits until the claim is Bound and its pod on a node; it
// returns the node and the zone of the claim's volume.
func waitPlaced(t *testing.T, ctx context.Context, ns, name string) (string, string) {
	t.Helper()
	var node, zone string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName == "" {
			return false, nil
		}
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimBound {
			return false, nil
		}
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = pod.Spec.NodeName
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == lab.ZoneKey {
					zone = e.Values[0]
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s/%s not placed: %v", ns, name, err)
	}
	return node, zone
}

// Issue 5, scenario 1 (ours): a node without the driver is filtered, so a
// pod that prefers it runs elsewhere. (The stock scheduler sends such a pod
// there and it stays Pending: test/e2e TestSelectedNodeGone.)
func TestNodeWithoutDriverFiltered(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-bare", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		claimAndPod(t, ctx, ns, class, fmt.Sprintf("app-%d", i), gi, "node-bare")
	}
	for i := 0; i < 3; i++ {
		node, zone := waitPlaced(t, ctx, ns, fmt.Sprintf("app-%d", i))
		if node == "node-bare" || zone != env.Nodes[node] {
			t.Errorf("app-%d on %s (zone %s), volume in %s", i, node, env.Nodes[node], zone)
		}
	}
}

// Issue 5, scenario 3 (ours): a claim still being provisioned for a node
// counts against the node's attach limit, so a second pod does not go there.
func TestPendingClaimCountsAgainstLimit(t *testing.T) {
	ctx, ns, class := setup(t)
	if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-one", Zone: "z3", Driver: true, MaxVolumes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(4 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	claimAndPod(t, ctx, ns, class, "first", gi, "node-one")
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "first", metav1.GetOptions{})
		return err == nil && pvc.Annotations["volume.kubernetes.io/selected-node"] == "node-one", nil
	}); err != nil {
		t.Fatalf("first claim not selected for node-one: %v", err)
	}
	claimAndPod(t, ctx, ns, class, "second", gi, "node-one")
	if node, _ := waitPlaced(t, ctx, ns, "first"); node != "node-one" {
		t.Errorf("first on %s, want node-one", node)
	}
	if node, _ := waitPlaced(t, ctx, ns, "second"); node == "node-one" {
		t.Error("second pod placed on node-one although its only attach slot is taken by a pending claim")
	}
}

// Issue 5, scenario 2 (ours), last because it fills the zones: a burst of 20 pods x 10 Gi against zones of
// 60, 60 and 100 Gi: every pod is placed where there was room, the driver
// never answers RESOURCE_EXHAUSTED, and no zone is over capacity.
func TestBurstRespectsCapacity(t *testing.T) {
	ctx, ns, class := setup(t)
	// Earlier tests used some space: give each zone exactly 60, 60 and 100
	// Gi free, and wait until the published capacity says so.
	free := map[string]int64{"z1": 60 * gi, "z2": 60 * gi, "z3": 100 * gi}
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := env.SetSegmentCapacity(ctx, s.Topology, s.UsedBytes+free[s.Topology[lab.ZoneKey]]); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.StorageV1().CSIStorageCapacities("csi-topology").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ok := 0
		for _, c := range list.Items {
			if c.StorageClassName == class && c.Capacity != nil && c.Capacity.Value() == free[c.NodeTopology.MatchLabels[lab.ZoneKey]] {
				ok++
			}
		}
		return ok == 3, nil
	}); err != nil {
		t.Fatalf("capacity objects do not show 60/60/100 Gi free: %v", err)
	}
	before, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 0; i < n; i++ {
		claimAndPod(t, ctx, ns, class, fmt.Sprintf("burst-%02d", i), 10*gi, "")
	}
	perZone := map[string]int{}
	for i := 0; i < n; i++ {
		node, zone := waitPlaced(t, ctx, ns, fmt.Sprintf("burst-%02d", i))
		if zone != env.Nodes[node] {
			t.Errorf("burst-%02d on %s in %s, volume in %s", i, node, env.Nodes[node], zone)
		}
		perZone[zone]++
	}
	limits := map[string]int{"z1": 6, "z2": 6, "z3": 10}
	for z, c := range perZone {
		if c > limits[z] {
			t.Errorf("zone %s holds %d volumes of 10 Gi, capacity %d", z, c, limits[z])
		}
	}
	reqs, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exhausted := 0
	for _, r := range reqs[len(before):] {
		if strings.Contains(r.Result, "ResourceExhausted") {
			exhausted++
		}
	}
	if exhausted != 0 {
		t.Errorf("%d CreateVolume calls answered RESOURCE_EXHAUSTED, want 0", exhausted)
	}
	t.Logf("volumes per zone: %v; CreateVolume calls: %d", perZone, len(reqs)-len(before))
}
