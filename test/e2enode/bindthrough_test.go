package e2enode

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestNodeDeploymentBindThrough runs every node's csi-provisioner with
// --bind-through (and the two status rules bind-through needs, which the
// node-deployment component does not grant: docs/configuration.md), so that
// the nodes' instances race for each Immediate claim and the winner binds
// it. 24 claims with kube-controller-manager running (the PV controller
// races the winner too), then 12 handed to the instances before
// kube-controller-manager is stopped (CreateVolume takes 3 s): those are
// bound by csi-provisioner alone. Every claim ends Bound to its own PV,
// which names it and is Bound, with exactly one CreateVolume over all
// drivers; no PV is bound to two claims, no claim is Lost; the namespace's
// deletion then deletes every PV and its volume (reclaim Delete).
func TestNodeDeploymentBindThrough(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	grantBindThrough(t, ctx)
	for _, name := range nl.Names {
		if err := nl.Node(name).StartProvisioner(ctx, "--bind-through"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range nl.Names {
			if err := nl.Node(name).StartProvisioner(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("restarting the provisioner of %s without --bind-through: %v", name, err)
			}
		}
	})
	racing := newImmediateClaims(t, ctx, ns, "race", 24)
	waitAllBound(t, ctx, ns, racing)

	slow := []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(3 * time.Second)}}
	for _, name := range nl.Names {
		if err := nl.SetFaults(ctx, name, slow); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range nl.Names {
			_ = nl.SetFaults(context.WithoutCancel(ctx), name, nil)
		}
	})
	alone := newImmediateClaims(t, ctx, ns, "alone", 12)
	waitHanded(t, ctx, ns, alone)
	nl.Cluster.StopControllerManager()
	t.Cleanup(func() {
		if err := nl.Cluster.StartControllerManager(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("restarting kube-controller-manager: %v", err)
		}
	})
	got, err := boundClaims(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range alone {
		if _, ok := got[name]; ok {
			t.Fatalf("claim %s was Bound before kube-controller-manager was stopped: CreateVolume was not slow enough for the test", name)
		}
	}
	bound := waitAllBound(t, ctx, ns, append(racing, alone...))
	by := map[string]int{}
	for _, name := range racing {
		by[volumeNameManager(bound[name].claim)]++
	}
	t.Logf("racing claims bound by: %s", countBy(by))
	for _, name := range alone {
		if by := volumeNameManager(bound[name].claim); by != "csi-provisioner-bind-through" {
			t.Errorf("claim %s bound by %q with kube-controller-manager stopped, want csi-provisioner-bind-through (its client's user agent)", name, by)
		}
	}
	checkNodeBindings(t, ctx, ns, bound)
}

// grantBindThrough grants the nodes' csi-provisioner the two rules of
// deploy/'s base that bind-through needs beyond the node-deployment
// component's, until the test ends.
func grantBindThrough(t *testing.T, ctx context.Context) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2enode-bind-through"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"persistentvolumes/status", "persistentvolumeclaims/status"}, Verbs: []string{"update"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: lab.PublisherNamespace, Name: "csi-node-provisioner"}}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.WithoutCancel(ctx), role.Name, metav1.DeleteOptions{})
	})
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.WithoutCancel(ctx), binding.Name, metav1.DeleteOptions{})
	})
}

// waitHanded waits until the PV controller has handed each claim to the
// driver's provisioners (volume.kubernetes.io/storage-provisioner).
func waitHanded(t *testing.T, ctx context.Context, ns string, names []string) {
	t.Helper()
	for _, name := range names {
		if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && pvc.Annotations["volume.kubernetes.io/storage-provisioner"] == lab.DriverName, nil
		}); err != nil {
			t.Fatalf("claim %s never handed to %s: %v", name, lab.DriverName, err)
		}
	}
}

// checkNodeBindings checks the binding invariants of the Bound claims of
// ns: each PV names its claim (UID included), is Bound and is on the
// claim's selected node; no two claims share a PV; no claim of ns is Lost;
// exactly one CreateVolume per claim over all drivers.
func checkNodeBindings(t *testing.T, ctx context.Context, ns string, bound map[string]bound) {
	t.Helper()
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pvc := range pvcs.Items {
		if pvc.Status.Phase == v1.ClaimLost {
			t.Errorf("claim %s is Lost", pvc.Name)
		}
	}
	calls := callsByVolume(t, ctx)
	owner := map[string]string{}
	for name, b := range bound {
		if other, ok := owner[b.pv.Name]; ok {
			t.Errorf("PV %s bound to claims %s and %s", b.pv.Name, other, name)
		}
		owner[b.pv.Name] = name
		if ref := b.pv.Spec.ClaimRef; ref == nil || ref.UID != b.claim.UID || b.pv.Status.Phase != v1.VolumeBound {
			t.Errorf("claim %s: PV %s names %+v and is %s, want this claim and Bound", name, b.pv.Name, ref, b.pv.Status.Phase)
		}
		if n, err := pvNode(b.pv); err != nil || n != b.claim.Annotations[lab.AnnSelectedNode] {
			t.Errorf("claim %s selected for %q: PV %s on %q (%v)", name, b.claim.Annotations[lab.AnnSelectedNode], b.pv.Name, n, err)
		}
		total := 0
		for _, recs := range calls[lab.VolumeName(b.claim)] {
			for _, r := range recs {
				if r.Code == "OK" {
					total++
				}
			}
		}
		if total != 1 {
			t.Errorf("claim %s: %d successful CreateVolume calls over all drivers, want 1: %+v", name, total, calls[lab.VolumeName(b.claim)])
		}
	}
}

// volumeNameManager is the field manager that owns the claim's
// spec.volumeName: who bound it.
func volumeNameManager(pvc *v1.PersistentVolumeClaim) string {
	for _, m := range pvc.ManagedFields {
		if m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:volumeName"`) {
			return m.Manager
		}
	}
	return "none"
}
