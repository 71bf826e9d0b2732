package e2eswap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Labels both provisioners put on their CSIStorageCapacity objects, and
// upstream's managed-by value of a central (not per-node) deployment.
const (
	labelDriver    = "csi.storage.k8s.io/drivername"
	labelManagedBy = "csi.storage.k8s.io/managed-by"
	managedBy      = "external-provisioner"
)

// capacityNamespace is where both provisioners publish: their $NAMESPACE,
// the lab's provisioner namespace, whose Role grants CSIStorageCapacities.
const capacityNamespace = lab.PublisherNamespace

// capacityOwnerPods are placeholder Pods (never scheduled) that the
// provisioners name in $POD_NAME with --capacity-ownerref-level=0: the lab
// runs them as processes, not in pods, so there is no ReplicaSet or
// Deployment above them for a higher level to find, and -1 (no owner) would
// skip the owner handling of both sides altogether. Distinct Pods stand for
// distinct owners, as the ReplicaSets of two revisions of a Deployment with
// --capacity-ownerref-level=1; one Pod for both sides stands for a stable
// owner, as the Deployment with level 2.
var capacityOwnerPods = []string{"csi-provisioner-capswap-a", "csi-provisioner-capswap-b", "csi-provisioner-capswap-c"}

// capacityArgs are the capacity flags both provisioners run with.
var capacityArgs = []string{"--enable-capacity", "--capacity-ownerref-level=0", "--capacity-poll-interval=2s",
	"--kube-api-capacity-qps=50", "--kube-api-capacity-burst=100"}

// capacityErrorLine matches a klog error line of either provisioner about
// capacity objects (a refused create or update, a failed delete).
var capacityErrorLine = regexp.MustCompile(`(?m)^E\d{4} .*(CSIStorageCapacity|[Cc]apacity).*$`)

// conflict is the API's answer to an update of an object changed since it
// was read: not a refusal but a race, retried at once. Upstream has one at
// start: its first poll asks for every object again while its first sync
// writes them, and the second update of an object may start from the
// informer's copy from before the first.
const conflict = "the object has been modified"

// twoControllers is the API's answer to an object given a second controller
// reference, what upstream does to an object controlled by another owner.
const twoControllers = "Only one reference can have Controller set to true"

// capacityPhase is one provisioner taking the capacity objects over.
type capacityPhase struct {
	name, binary string
	// owner is the index of the provisioner's owner Pod.
	owner int
	// gib is the capacity given to the segments before the provisioner
	// starts.
	gib int64
	// refused: the provisioner cannot update the objects of another
	// controller, and the documented remedy (deleting them) is applied.
	refused bool
}

// TestCapacityAcrossSwap: upstream publishes CSIStorageCapacity objects,
// csi-provisioner takes them over, upstream takes them back, and so on,
// with the same capacity flags. After each swap (the segments' capacities
// changed while no provisioner ran, so a stale figure shows): exactly one
// object per (segment, WaitForFirstConsumer class of the driver), labelled
// with the driver and managed-by=external-provisioner, controlled by the new
// provisioner's owner only, with the free bytes the driver reports, the same
// object as before the swap (updated in place, not recreated), no object of
// another managed-by value, and no capacity error in the new provisioner's
// log. csi-provisioner takes the objects over from another owner; upstream
// only from the same owner (docs/migrating.md "Capacity objects"): given
// another, its updates are refused until the objects are deleted, after
// which it publishes afresh.
func TestCapacityAcrossSwap(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	env.EnableStorageCapacity(t, ctx)
	owners := capacitySetup(t, ctx)
	ours := filepath.Join(env.BinDir, "csi-provisioner")
	phases := []capacityPhase{
		{name: "upstream publishes", binary: upstream, owner: 0, gib: 6000},
		{name: "ours takes over from another owner", binary: ours, owner: 1, gib: 5000},
		{name: "upstream takes back with the same owner", binary: upstream, owner: 1, gib: 4000},
		{name: "ours takes over again from another owner", binary: ours, owner: 0, gib: 3000},
		{name: "upstream with another owner: refused, objects deleted", binary: upstream, owner: 2, gib: 2000, refused: true},
	}
	var uids map[string]types.UID
	for _, ph := range phases {
		env.StopProvisioner()
		setSegmentCapacities(t, ctx, ph.gib)
		procEnv := []string{"POD_NAME=" + capacityOwnerPods[ph.owner], "NAMESPACE=" + capacityNamespace}
		if err := env.StartProvisionerBinaryEnv(ph.binary, procEnv, capacityArgs...); err != nil {
			t.Fatalf("%s: starting the provisioner: %v", ph.name, err)
		}
		if ph.refused {
			capacityRemedy(t, ctx, ph.name)
			waitCapacities(t, ctx, ph.name, owners[ph.owner])
			// Its own objects it updates without error.
			logFrom := logSize(t)
			setSegmentCapacities(t, ctx, ph.gib/2)
			got := waitCapacities(t, ctx, ph.name+", updated", owners[ph.owner])
			checkCapacityLog(t, ph.name, logFrom)
			t.Logf("%s: %d objects published afresh and updated, controlled by pod %s", ph.name, len(got), capacityOwnerPods[ph.owner])
			continue
		}
		got := waitCapacities(t, ctx, ph.name, owners[ph.owner])
		for key, uid := range uids {
			if got[key] != uid {
				t.Errorf("%s: object of %s recreated (uid %s, was %s), not taken over", ph.name, key, got[key], uid)
			}
		}
		uids = got
		checkCapacityLog(t, ph.name, 0)
		t.Logf("%s: %d objects, each with its segment's free bytes, managed-by=%s, controlled by pod %s", ph.name, len(got), managedBy, capacityOwnerPods[ph.owner])
	}
}

// capacityRemedy waits until the running provisioner logs that the API
// refused a second controller reference on a capacity object, then deletes
// the driver's capacity objects (docs/migrating.md's remedy).
func capacityRemedy(t *testing.T, ctx context.Context, phase string) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, waitTimeout(), func(context.Context) (bool, error) {
		data, err := os.ReadFile(env.Provisioner().LogPath())
		return err == nil && strings.Contains(string(data), twoControllers), nil
	}); err != nil {
		t.Fatalf("%s: no update refused with %q in %s: %v", phase, twoControllers, env.Provisioner().LogPath(), err)
	}
	if err := client.StorageV1().CSIStorageCapacities(capacityNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: labelDriver + "=" + lab.DriverName}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: updates refused (%s), the driver's objects deleted", phase, twoControllers)
}

// logSize returns the length of the running provisioner's log.
func logSize(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(env.Provisioner().LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// waitCapacities waits until checkCapacities finds nothing wrong, fails the
// test otherwise, and returns the objects' UIDs by key.
func waitCapacities(t *testing.T, ctx context.Context, phase string, owner types.UID) map[string]types.UID {
	t.Helper()
	var got map[string]types.UID
	detail := ""
	err := env.Cluster.WaitFor(ctx, waitTimeout(), func(ctx context.Context) (bool, error) {
		objs, problems, err := checkCapacities(ctx, owner)
		if err != nil {
			if detail == "" {
				detail = err.Error()
			}
			return false, nil
		}
		got, detail = objs, strings.Join(problems, "; ")
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: capacity objects wrong: %v: %s", phase, err, detail)
	}
	return got
}

// capacitySetup creates two WaitForFirstConsumer classes of the driver, the
// owner Pods and a Role that lets the provisioner's ServiceAccount get them
// (upstream's rbac.yaml grants pods get; deploy/ does not, as it needs no
// owner lookup by default), and returns the Pods' UIDs. At cleanup, it
// deletes them and the driver's capacity objects and restores the segments
// and the lab's provisioner.
func capacitySetup(t *testing.T, ctx context.Context) []types.UID {
	t.Helper()
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	classes := []string{"capswap-a", "capswap-b"}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "capswap-owner"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "capswap-owner"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "csi-provisioner", Namespace: capacityNamespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		env.StopProvisioner()
		_ = client.StorageV1().CSIStorageCapacities(capacityNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: labelDriver + "=" + lab.DriverName})
		for _, name := range classes {
			_ = client.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range capacityOwnerPods {
			_ = client.CoreV1().Pods(capacityNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		_ = client.RbacV1().RoleBindings(capacityNamespace).Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = client.RbacV1().Roles(capacityNamespace).Delete(ctx, role.Name, metav1.DeleteOptions{})
		for _, s := range segs {
			_ = env.SetSegmentCapacity(ctx, s.Topology, s.CapacityBytes)
		}
		if err := env.StartProvisioner(); err != nil {
			t.Errorf("restarting the lab's provisioner: %v", err)
		}
	})
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	for _, name := range classes {
		if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: lab.DriverName, VolumeBindingMode: &mode,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.RbacV1().Roles(capacityNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(capacityNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var uids []types.UID
	for _, name := range capacityOwnerPods {
		pod, err := client.CoreV1().Pods(capacityNamespace).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{SchedulerName: "none", Containers: []v1.Container{{Name: "csi-provisioner", Image: "csi-provisioner"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, pod.UID)
	}
	return uids
}

// setSegmentCapacities gives the i-th segment of the mock driver gib+i GiB,
// so that every segment's figure changes and no two are alike.
func setSegmentCapacities(t *testing.T, ctx context.Context, gib int64) {
	t.Helper()
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range segs {
		if err := env.SetSegmentCapacity(ctx, s.Topology, (gib+int64(i))<<30); err != nil {
			t.Fatal(err)
		}
	}
}

// checkCapacities compares the driver's CSIStorageCapacity objects with what
// they should be, and returns the objects' UIDs by key ("<class> <segment>")
// and the differences found.
func checkCapacities(ctx context.Context, owner types.UID) (map[string]types.UID, []string, error) {
	want, err := wantCapacities(ctx)
	if err != nil {
		return nil, nil, err
	}
	list, err := client.StorageV1().CSIStorageCapacities(capacityNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	got := map[string]types.UID{}
	seen := map[string]int{}
	var problems []string
	for _, o := range list.Items {
		if o.Labels[labelDriver] != lab.DriverName {
			problems = append(problems, fmt.Sprintf("%s without label %s=%s: %v", o.Name, labelDriver, lab.DriverName, o.Labels))
			continue
		}
		key := capacityKey(o.StorageClassName, o.NodeTopology)
		seen[key]++
		got[key] = o.UID
		free, ok := want[key]
		switch {
		case o.Labels[labelManagedBy] != managedBy:
			problems = append(problems, fmt.Sprintf("%s (%s) labelled %s=%q", o.Name, key, labelManagedBy, o.Labels[labelManagedBy]))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (%s) is of no segment and class of the driver", o.Name, key))
		case o.Capacity == nil || o.Capacity.Value() != free:
			problems = append(problems, fmt.Sprintf("%s (%s) says %v, the driver %d", o.Name, key, o.Capacity, free))
		}
		if c := metav1.GetControllerOfNoCopy(&o); c == nil || c.UID != owner || len(o.OwnerReferences) != 1 {
			problems = append(problems, fmt.Sprintf("%s (%s) owners %v, want the owner pod of uid %s only", o.Name, key, o.OwnerReferences, owner))
		}
	}
	for key := range want {
		if seen[key] != 1 {
			problems = append(problems, fmt.Sprintf("%d objects of %s", seen[key], key))
		}
	}
	sort.Strings(problems)
	return got, problems, nil
}

// wantCapacities returns the free bytes the mock driver reports per
// (WaitForFirstConsumer class of the driver, segment), by key.
func wantCapacities(ctx context.Context) (map[string]int64, error) {
	segs, err := env.Segments(ctx)
	if err != nil {
		return nil, err
	}
	classes, err := client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := map[string]int64{}
	for _, c := range classes.Items {
		if c.Provisioner != lab.DriverName || c.VolumeBindingMode == nil || *c.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			continue
		}
		for _, s := range segs {
			want[capacityKey(c.Name, &metav1.LabelSelector{MatchLabels: s.Topology})] = s.CapacityBytes - s.UsedBytes
		}
	}
	return want, nil
}

// capacityKey names a (class, segment) pair: the class and the segment's
// labels, sorted.
func capacityKey(class string, segment *metav1.LabelSelector) string {
	var pairs []string
	if segment != nil {
		for k, v := range segment.MatchLabels {
			pairs = append(pairs, k+"="+v)
		}
		for _, e := range segment.MatchExpressions {
			pairs = append(pairs, fmt.Sprintf("%s %s %v", e.Key, e.Operator, e.Values))
		}
	}
	slices.Sort(pairs)
	return class + " {" + strings.Join(pairs, ",") + "}"
}

// checkCapacityLog fails the test when the running provisioner logged an
// error about capacity objects other than a conflict (e.g. an update the
// API refused, retried in a loop) past the first from bytes of its log.
func checkCapacityLog(t *testing.T, phase string, from int) {
	t.Helper()
	data, err := os.ReadFile(env.Provisioner().LogPath())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range capacityErrorLine.FindAllString(string(data[from:]), -1) {
		if !strings.Contains(line, conflict) {
			lines = append(lines, line)
		}
	}
	if len(lines) > 0 {
		lines = lines[:min(len(lines), 5)]
		t.Errorf("%s: the provisioner logged capacity errors (%s):\n%s", phase, env.Provisioner().LogPath(), strings.Join(lines, "\n"))
	}
}
