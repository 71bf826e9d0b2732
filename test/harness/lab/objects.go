package lab

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/component-base/metrics/testutil"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// The helpers of this file are the ones every end-to-end package needs: a
// namespace per test, classes, claims and pods of the mock driver, and the
// waits on them. Each waits at most WorkloadTimeout and, when it gives up,
// fails the test with Describe of the namespace.

// AnnSelectedNode is the claim annotation the scheduler sets for a
// WaitForFirstConsumer claim.
const AnnSelectedNode = storagehelpers.AnnSelectedNode

// TestObjectName is prefix followed by the test's name, lowercase, with "/"
// and "_" as "-", cut to 60 characters: a valid, per-test name for a
// namespace or a StorageClass.
func TestObjectName(t testing.TB, prefix string) string {
	name := prefix + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	return strings.TrimRight(name, "-")
}

// NewNamespace creates the namespace TestObjectName(t, prefix), waits for
// its default ServiceAccount and deletes it when the test ends. It returns
// the test's context (with a ktesting logger) and the namespace's name.
func NewNamespace(t testing.TB, c *controlplane.Cluster, prefix string) (context.Context, string) {
	t.Helper()
	return NewNamespaceCleanup(t, c, prefix, func(ctx context.Context, ns string) {
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
}

// NewNamespaceCleanup is NewNamespace with cleanup, instead of a plain
// delete, run when the test ends (with a context that is not cancelled).
func NewNamespaceCleanup(t testing.TB, c *controlplane.Cluster, prefix string, cleanup func(ctx context.Context, ns string)) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	name := TestObjectName(t, prefix)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(context.WithoutCancel(ctx), name) })
	if err := c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("default ServiceAccount in %s: %v", name, err)
	}
	return ctx, name
}

// TestNamespaceWithClass is NamespaceWithClass for the name
// TestObjectName(t, prefix); it returns the test's context and that name
// (of the namespace and of the class). Neither is deleted at the end.
func (l *Lab) TestNamespaceWithClass(t testing.TB, prefix string) (context.Context, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	name := TestObjectName(t, prefix)
	l.NamespaceWithClass(t, ctx, name)
	return ctx, name
}

// ClassOptions describes a StorageClass of NewClass.
type ClassOptions struct {
	// Immediate binding; WaitForFirstConsumer otherwise.
	Immediate bool
	// Zones, when set, is the class's allowedTopologies term on ZoneKey.
	Zones []string
	// Terms are more allowedTopologies terms.
	Terms []v1.TopologySelectorTerm
	// Reclaim is the reclaim policy; Delete when empty.
	Reclaim v1.PersistentVolumeReclaimPolicy
	// Parameters are the class's parameters.
	Parameters map[string]string
}

// NewClass creates a StorageClass of the mock driver and deletes it when
// the test ends; it returns name.
func NewClass(t testing.TB, ctx context.Context, c *controlplane.Cluster, name string, o ClassOptions) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	if o.Immediate {
		mode = storagev1.VolumeBindingImmediate
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if o.Reclaim != "" {
		reclaim = o.Reclaim
	}
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: DriverName,
		VolumeBindingMode: &mode, ReclaimPolicy: &reclaim, Parameters: o.Parameters,
	}
	if len(o.Zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: ZoneKey, Values: o.Zones}}}}
	}
	sc.AllowedTopologies = append(sc.AllowedTopologies, o.Terms...)
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	return name
}

// NewClaim creates a ReadWriteOnce claim of class for size bytes, changed
// by each of mutate first, and returns it as created.
func NewClaim(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name, class string, size int64, mutate ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
	for _, m := range mutate {
		m(pvc)
	}
	created, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// VolumeName is the CSI volume name csi-provisioner gives a claim's volume
// (--volume-name-prefix=pvc, the whole UID).
func VolumeName(pvc *v1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// PodOptions describes a pod of NewPod.
type PodOptions struct {
	// Claims are mounted, one volume each.
	Claims       []string
	NodeSelector map[string]string
	// AntiAffinityLabel spreads pods with the same app label over zones.
	AntiAffinityLabel string
	// NotInZone keeps the pod out of a zone (required node affinity).
	NotInZone string
	// Affinity, when set, is the pod's affinity as given (before
	// AntiAffinityLabel and NotInZone add theirs).
	Affinity *v1.Affinity
}

// NewPod creates a pause pod.
func NewPod(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name string, o PodOptions) {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			Containers:   []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			NodeSelector: o.NodeSelector,
			Affinity:     o.Affinity,
		},
	}
	for i, claim := range o.Claims {
		vol := fmt.Sprintf("v%d", i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: vol, MountPath: "/" + vol})
	}
	if o.AntiAffinityLabel != "" {
		pod.Labels = map[string]string{"app": o.AntiAffinityLabel}
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &v1.Affinity{}
		}
		pod.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": o.AntiAffinityLabel}},
				TopologyKey:   ZoneKey,
			}},
		}
	}
	if o.NotInZone != "" {
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &v1.Affinity{}
		}
		pod.Spec.Affinity.NodeAffinity = &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: ZoneKey, Operator: v1.NodeSelectorOpNotIn, Values: []string{o.NotInZone}}}}},
		}}
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// DeletePod deletes a pod at once (grace period 0: no kubelet ends it) and
// waits until it is gone.
func DeletePod(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name string) {
	t.Helper()
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod %s/%s not deleted: %v", ns, name, err)
	}
}

// WaitBound waits until the claim is Bound and returns its PV.
func WaitBound(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name string) *v1.PersistentVolume {
	t.Helper()
	var pv *v1.PersistentVolume
	if err := c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimBound {
			return false, nil
		}
		pv, err = c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("claim %s/%s not bound: %v; events: %s\n%s", ns, name, err,
			EventsOf(ctx, c, ns, "PersistentVolumeClaim", name), Describe(ctx, c, ns))
	}
	return pv
}

// WaitPodNode waits until the pod is bound to a node and returns the node.
func WaitPodNode(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name string) string {
	t.Helper()
	var node string
	if err := c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = pod.Spec.NodeName
		return node != "", nil
	}); err != nil {
		t.Fatalf("pod %s/%s not scheduled: %v; events: %s\n%s", ns, name, err, EventsOf(ctx, c, ns, "Pod", name), Describe(ctx, c, ns))
	}
	return node
}

// WaitLogged waits until the file at path has a line containing every one
// of parts.
func WaitLogged(t testing.TB, ctx context.Context, c *controlplane.Cluster, path string, parts ...string) {
	t.Helper()
	if err := c.WaitFor(ctx, WorkloadTimeout, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, nil
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if containsAll(line, parts) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no line of %s with %q: %v", path, parts, err)
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// MustScrape is Scrape that fails the test on error.
func MustScrape(t testing.TB, ctx context.Context, url string) testutil.Metrics {
	t.Helper()
	m, err := Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// EventsOf returns the Events of one object of ns as lines
// "  type reason: message".
func EventsOf(ctx context.Context, c *controlplane.Cluster, ns, kind, name string) string {
	list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
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

// Describe sums up the pods, claims and last 30 warning Events of ns for a
// failure message.
func Describe(ctx context.Context, c *controlplane.Cluster, ns string) string {
	var b strings.Builder
	if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  pod %s: node %q", p.Name, p.Spec.NodeName)
			for _, cond := range p.Status.Conditions {
				if cond.Type == v1.PodScheduled && cond.Status != v1.ConditionTrue {
					fmt.Fprintf(&b, ", %s: %s", cond.Reason, cond.Message)
				}
			}
			b.WriteByte('\n')
		}
	}
	if pvcs, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, pvc := range pvcs.Items {
			fmt.Fprintf(&b, "  claim %s: %s, selected-node %q, volume %q\n", pvc.Name, pvc.Status.Phase, pvc.Annotations[AnnSelectedNode], pvc.Spec.VolumeName)
		}
	}
	if events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"}); err == nil {
		sort.Slice(events.Items, func(i, j int) bool { return events.Items[i].LastTimestamp.Before(&events.Items[j].LastTimestamp) })
		if n := len(events.Items); n > 30 {
			events.Items = events.Items[n-30:]
		}
		for _, e := range events.Items {
			fmt.Fprintf(&b, "  event %s %s/%s (x%d): %s\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Count, e.Message)
		}
	}
	return b.String()
}

// HTTPStatus returns the status of a GET of url, 0 when the request fails.
func HTTPStatus(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// EventLines returns the Events of the objects named name in ns (of any
// kind) as lines "type reason: message".
func EventLines(ctx context.Context, c *controlplane.Cluster, ns, name string) []string {
	list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return []string{err.Error()}
	}
	out := make([]string, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return out
}

// WaitEvent waits for an Event on the object name of ns whose line
// "type reason: message" contains every one of parts (e.g. "Warning
// ProvisioningFailed:" and words of the message), and returns that line.
func WaitEvent(t testing.TB, ctx context.Context, c *controlplane.Cluster, ns, name string, parts ...string) string {
	t.Helper()
	var found string
	if err := c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		for _, line := range EventLines(ctx, c, ns, name) {
			if containsAll(line, parts) {
				found = line
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no Event on %s/%s saying %q: %v\nevents:\n%s", ns, name, parts, err, strings.Join(EventLines(ctx, c, ns, name), "\n"))
	}
	return found
}
