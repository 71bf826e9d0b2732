package e2eexplain

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// readerNamespace holds the ServiceAccounts the tool runs as here.
const readerNamespace = "explain-readers"

// serviceAccount creates a ServiceAccount in readerNamespace, bound to a
// ClusterRole of rules (cluster-wide) or, with namespace set, a Role there;
// it returns a kubeconfig for it.
func serviceAccount(t *testing.T, ctx context.Context, name, namespace string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	c := client
	if _, err := c.CoreV1().Namespaces().Get(ctx, readerNamespace, metav1.GetOptions{}); err != nil {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: readerNamespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().ServiceAccounts(readerNamespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: readerNamespace}}
	role := "explain-" + name
	var err error
	if namespace == "" {
		_, err = c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{})
		if err == nil {
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}, metav1.CreateOptions{})
		}
	} else {
		_, err = c.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{})
		if err == nil {
			_, err = c.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}, metav1.CreateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = c.RbacV1().ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{})
		_ = c.CoreV1().ServiceAccounts(readerNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	kubeconfig, err := env.Cluster.ServiceAccountKubeconfig(ctx, readerNamespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestExplainOnlyReads runs the tool as a ServiceAccount that may read
// everything and checks, in the apiserver's audit log, that every request it
// made was a get or a list (and that there were some).
func TestExplainOnlyReads(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "x-")
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Zones: []string{"z9"}}), gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", ""))
	kubeconfig := serviceAccount(t, ctx, "reader", "", []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}})
	out, err := runTool(ctx, kubeconfig, "explain", "pod/data", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	if line := conclusionLine(out); !strings.HasPrefix(line, "conclusion ("+string(explain.CauseNoAllowedSegment)+")") || strings.Contains(out, "could not") {
		t.Errorf("as a reader of everything: want the NoAllowedSegment conclusion and no refused read:\n%s", out)
	}
	f, err := os.Open(env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reads := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.User.Username != "system:serviceaccount:"+readerNamespace+":reader" {
			continue
		}
		switch ev.Verb {
		case "get", "list", "watch":
			reads++
		default:
			t.Errorf("the tool wrote: %s %s", ev.Verb, ev.RequestURI)
		}
	}
	if reads == 0 {
		t.Errorf("no request of the reader in the audit log %s", env.Cluster.AuditLog)
	}
}

// TestExplainAsNamespaceUser runs the tool as a user who may read only its
// namespace's claims, pods and Events and the StorageClasses: each refused
// read is a line naming the rule that would allow it, and the conclusion
// still comes from what could be read (the provisioner's Event).
func TestExplainAsNamespaceUser(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "x-")
	class := lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true, Parameters: map[string]string{"csi.storage.k8s.io/fs-type": "ext4"}})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	waitCause(t, ctx, ns, "data", explain.CauseBadClassParameter, "unknown key(s)")
	kubeconfig := serviceAccount(t, ctx, "tenant", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "pods", "events"}, Verbs: []string{"get", "list"}}})
	classes := "explain-tenant-classes"
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: classes},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: classes},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: readerNamespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: classes}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.WithoutCancel(ctx), classes, metav1.DeleteOptions{})
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.WithoutCancel(ctx), classes, metav1.DeleteOptions{})
	})
	out, err := runTool(ctx, kubeconfig, "explain", "pvc/data", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("as the namespace user:\n%s", out)
	for _, want := range []string{
		`? access      could not list nodes (cluster-wide); allowed by the rule apiGroups: [""], resources: ["nodes"], verbs: ["list"]`,
		"? access      could not list leader lease " + contract.LeaderLeaseName(lab.DriverName),
		"✓ provisioner provisioner running: Event ProvisioningFailed from " + lab.DriverName,
		"conclusion (" + string(explain.CauseBadClassParameter) + "): class " + class + " has a bad parameter",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("as a namespace user: no %q in\n%s", want, out)
		}
	}
}
