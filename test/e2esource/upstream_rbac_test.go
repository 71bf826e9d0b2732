package e2esource

import (
	"context"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// upstreamNamespace is where upstream's rbac.yaml puts its ServiceAccount
// and its Role (leases, capacity objects, pods, replicasets).
const upstreamNamespace = "default"

// upstreamServiceAccount runs csi-provisioner as a vendor of upstream
// external-provisioner does: upstream's own deploy/kubernetes/rbac.yaml, as
// its release ships it, plus get on volumeattributesclasses, the rule a
// user of VolumeAttributesClasses adds for upstream (its rbac.yaml grants
// nothing on them, and it reads a claim's class with a GET). It returns
// the ServiceAccount's kubeconfig.
func upstreamServiceAccount(t *testing.T, ctx context.Context) string {
	t.Helper()
	up, err := controlplane.BuildUpstream(ctx, env.Cluster.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.ApplyFile(ctx, up.RBAC(), false); err != nil {
		t.Fatal(err)
	}
	rbac := client.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "upstream-vac-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattributesclasses"}, Verbs: []string{"get"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "upstream-vac-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: upstreamNamespace, Name: "csi-provisioner"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeconfig, err := env.Cluster.ServiceAccountKubeconfig(ctx, upstreamNamespace, "csi-provisioner")
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// csi-provisioner swapped in for upstream external-provisioner v6.3.0 under
// upstream's unmodified RBAC (no patch on claims, no watch on
// VolumeSnapshotContents) provisions WaitForFirstConsumer and immediate
// claims, deletes, clones, restores a snapshot, applies a
// VolumeAttributesClass and publishes capacity objects; it says once that
// it writes claims with UPDATE and reads snapshot contents with GET.
func TestUnderUpstreamRBAC(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	kubeconfig := upstreamServiceAccount(t, ctx)
	// A later --kubeconfig wins over the lab's.
	if err := env.StartProvisioner("--kubeconfig="+kubeconfig, "--enable-capacity", "--capacity-namespace="+upstreamNamespace,
		"--capacity-poll-interval=2s", "--leader-election", "--leader-election-namespace="+upstreamNamespace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.StartProvisioner(); err != nil {
			t.Errorf("restarting the lab's provisioner: %v", err)
		}
	})

	// Immediate, then deleted: the in-flight record is written and removed.
	anyZone := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	lab.NewClaim(t, ctx, env.Cluster, ns, "immediate", anyZone, 1<<30)
	deleted := lab.WaitBound(t, ctx, env.Cluster, ns, "immediate")
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "immediate", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, cerr := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "immediate", metav1.GetOptions{})
		_, perr := client.CoreV1().PersistentVolumes().Get(ctx, deleted.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(cerr) && apierrors.IsNotFound(perr), nil
	}); err != nil {
		t.Fatalf("deleted claim or its PV %s still there: %v", deleted.Name, err)
	}

	// WaitForFirstConsumer with a pod.
	env.ClaimAndPod(t, ctx, ns, ns, "wffc", 1<<30, "")
	env.WaitPlaced(t, ctx, ns, "wffc")

	// Clone and restore.
	src := source(t, ctx, ns, 1<<30)
	lab.NewClaim(t, ctx, env.Cluster, ns, "clone", anyZone, 1<<30, cloneOf("src"))
	if vol := volume(t, ctx, lab.WaitBound(t, ctx, env.Cluster, ns, "clone").Spec.CSI.VolumeHandle); vol.ContentSource == nil || vol.ContentSource.VolumeID != src.Spec.CSI.VolumeHandle {
		t.Errorf("clone made from %+v, want volume %s", vol.ContentSource, src.Spec.CSI.VolumeHandle)
	}
	snapshotOf(t, ctx, ns, "snap", src, true)
	lab.NewClaim(t, ctx, env.Cluster, ns, "restore", anyZone, 1<<30, restoreOf("snap"))
	if vol := volume(t, ctx, lab.WaitBound(t, ctx, env.Cluster, ns, "restore").Spec.CSI.VolumeHandle); vol.ContentSource == nil || vol.ContentSource.SnapshotID == "" {
		t.Errorf("restored volume made from %+v, want a snapshot", vol.ContentSource)
	}

	// A VolumeAttributesClass, read with a GET.
	vacName := ns + "-gold"
	if _, err := client.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: vacName}, DriverName: lab.DriverName, Parameters: map[string]string{"iops": "5000"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().VolumeAttributesClasses().Delete(context.WithoutCancel(ctx), vacName, metav1.DeleteOptions{})
	})
	lab.NewClaim(t, ctx, env.Cluster, ns, "gold", anyZone, 1<<30, func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = &vacName })
	if vol := volume(t, ctx, lab.WaitBound(t, ctx, env.Cluster, ns, "gold").Spec.CSI.VolumeHandle); vol.MutableParameters["iops"] != "5000" {
		t.Errorf("the driver's volume has mutable parameters %v, want iops=5000", vol.MutableParameters)
	}

	// Capacity objects of the WaitForFirstConsumer class, one per zone.
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.StorageV1().CSIStorageCapacities(upstreamNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, c := range list.Items {
			if c.StorageClassName == ns {
				n++
			}
		}
		return n == 2, nil
	}); err != nil {
		t.Errorf("no capacity object per zone for class %s in %s: %v", ns, upstreamNamespace, err)
	}

	logs, err := os.ReadFile(env.Provisioner().LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"Claims may not be patched (RBAC)", "VolumeSnapshotContents may not be watched (RBAC)"} {
		if n := strings.Count(string(logs), line); n != 1 {
			t.Errorf("%q logged %d times, want once", line, n)
		}
	}
}
