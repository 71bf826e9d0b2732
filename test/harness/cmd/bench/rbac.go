package main

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// grantUpstreamRBAC gives the provisioner's ServiceAccount, beside the
// project's rules, the rules upstream external-provisioner v6.3.0 ships
// (its deploy/kubernetes/rbac.yaml: get on what it also watches, Event
// updates, VolumeAttachments, snapshots), so that a --compare binary is not
// held back by the project's narrower rules; the node deployment's
// ServiceAccount gets them too. Ours never uses them.
func (e *env) grantUpstreamRBAC(ctx context.Context) error {
	rule := func(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-upstream-provisioner"}, Rules: []rbacv1.PolicyRule{
		rule("", []string{"persistentvolumes"}, "get", "list", "watch", "create", "patch", "delete"),
		rule("", []string{"persistentvolumeclaims"}, "get", "list", "watch", "update"),
		rule("storage.k8s.io", []string{"storageclasses", "csinodes", "volumeattachments"}, "get", "list", "watch"),
		rule("", []string{"events"}, "list", "watch", "create", "update", "patch"),
		rule("", []string{"nodes"}, "get", "list", "watch"),
		rule("snapshot.storage.k8s.io", []string{"volumesnapshots"}, "get", "list", "watch", "update"),
		rule("snapshot.storage.k8s.io", []string{"volumesnapshotcontents"}, "get", "list"),
	}}
	if _, err := e.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := e.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "csi-provisioner", Namespace: "csi-topology"},
			// The node deployment's instances (nodes scenario).
			{Kind: rbacv1.ServiceAccountKind, Name: "csi-node-provisioner", Namespace: lab.PublisherNamespace}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}, metav1.CreateOptions{})
	return err
}
