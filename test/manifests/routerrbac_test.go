package manifests

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// routerDeployment is csi-node-router as a kustomization renders it: the
// namespace and ServiceAccount of its Deployment, the driver it labels
// for, and the ServiceAccount and the roles and bindings that name it.
type routerDeployment struct {
	namespace, serviceAccount, driver string
	rbac                              []*unstructured.Unstructured
}

// renderedRouter finds csi-node-router's Deployment and RBAC in objs.
func renderedRouter(t *testing.T, objs []*unstructured.Unstructured) routerDeployment {
	t.Helper()
	var r routerDeployment
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatalf("Deployment %s: %v", o.GetName(), err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "csi-node-router" {
				continue
			}
			r.namespace, r.serviceAccount = d.Namespace, d.Spec.Template.Spec.ServiceAccountName
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--driver-name="); ok {
					r.driver = v
				}
			}
		}
	}
	if r.serviceAccount == "" || r.driver == "" {
		t.Fatalf("no Deployment with a csi-node-router container with a ServiceAccount and --driver-name (found %+v)", r)
	}
	roles := map[kindName]bool{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			if o.GetNamespace() == r.namespace && o.GetName() == r.serviceAccount {
				r.rbac = append(r.rbac, o)
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
			if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == r.serviceAccount && s.Namespace == r.namespace
			}) {
				r.rbac = append(r.rbac, o)
				ns := ""
				if b.RoleRef.Kind == "Role" {
					ns = o.GetNamespace()
				}
				roles[kindName{b.RoleRef.Kind, ns, b.RoleRef.Name}] = true
			}
		}
	}
	for _, o := range objs {
		if roles[kindName{o.GetKind(), o.GetNamespace(), o.GetName()}] {
			r.rbac = append(r.rbac, o)
		}
	}
	return r
}

// TestRouterRBACIsWhatItUses runs csi-node-router under the RBAC the first
// node-deployment overlay renders, through every path it has (leader
// election, a WaitForFirstConsumer claim the scheduler placed, an unselected
// Immediate claim, a PV of one node, a PV of no node and its NodeNotKnown
// Event posted twice), collects its requests from kube-apiserver's audit
// log, and checks that the rules of every overlay that includes the
// component grant exactly what it used: nothing refused, nothing granted
// unused, namespaced grants only in the namespaces it wrote (its Lease's,
// and default for Events about PVs), cluster-wide only where its objects
// can be anywhere.
func TestRouterRBACIsWhatItUses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	objs := render(t, nodeDeploymentOverlays[0].dir)
	r := renderedRouter(t, objs)
	if user := "system:serviceaccount:" + r.namespace + ":" + r.serviceAccount; user != routerUser {
		t.Fatalf("csi-node-router runs as %s; the audit policy records %s: update routerUser", user, routerUser)
	}
	ns := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Namespace" && o.GetName() == r.namespace
	})
	if ns < 0 {
		t.Fatalf("%s renders no Namespace %s for csi-node-router", nodeDeploymentOverlays[0].dir, r.namespace)
	}
	for _, o := range append([]*unstructured.Unstructured{objs[ns]}, r.rbac...) {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.ApplyYAML(ctx, data, false); err != nil {
			t.Fatalf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	since := time.Now().Add(-time.Second)
	// client-go's informers stream their initial list in a watch
	// (WatchListClient) where the API server can, and list where it cannot
	// (servers before streaming lists, or with them off): the second run
	// has the router list as it does there.
	for _, mode := range []struct {
		name string
		env  []string
	}{
		{name: "streaming lists"},
		{name: "lists", env: []string{"KUBE_FEATURE_WatchListClient=false"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			router, metricsURL := startRouter(t, ctx, r, mode.env)
			runRouterScenario(t, ctx, r.driver, metricsURL)
			// SIGTERM: it releases its Lease (an update) before it exits.
			router.Stop(15 * time.Second)
			if err := router.Wait(); err != nil {
				t.Errorf("csi-node-router exited with %v; the end of %s:\n%s", err, router.LogPath(), router.LogTail(20))
			}
		})
	}

	used, refused, nonResource, err := auditedGrants(cluster.AuditLog, routerUser, since, r.namespace, metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) > 0 {
		t.Errorf("the API server refused csi-node-router (403):\n  %s", strings.Join(refused, "\n  "))
	}
	if len(nonResource) > 0 {
		t.Errorf("csi-node-router requested non-resource URLs, which its rules do not cover:\n  %s", strings.Join(nonResource, "\n  "))
	}
	t.Logf("csi-node-router's requests need:\n  %s", used.describe())
	for _, o := range nodeDeploymentOverlays {
		objs := render(t, o.dir)
		ro := renderedRouter(t, objs)
		granted, other := effectiveGrants(t, objs, ro.namespace, ro.serviceAccount)
		if len(other) > 0 {
			t.Errorf("%s: csi-node-router's ServiceAccount is bound to csi-node-publisher's roles: %s", o.dir, other.describe())
		}
		if extra := unused(granted, used); len(extra) > 0 {
			t.Errorf("%s grants csi-node-router what it never used (scope, resource, verb):\n  %s", o.dir, strings.Join(extra, "\n  "))
		}
		if missing := uncovered(used, granted); len(missing) > 0 {
			t.Errorf("%s does not grant csi-node-router what it used (scope, resource, verb):\n  %s", o.dir, missing.describe())
		}
	}
}

// startRouter starts csi-node-router as its Deployment does (leader
// election in its namespace), with a short Lease, as its ServiceAccount,
// with env added to its environment, and returns once it answers /readyz
// with the URL of its metrics.
func startRouter(t *testing.T, ctx context.Context, r routerDeployment, env []string) (*controlplane.Process, string) {
	t.Helper()
	binDir := t.TempDir()
	if err := controlplane.BuildProject(ctx, cluster.RepoRoot, binDir, "./cmd/csi-node-router"); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, r.namespace, r.serviceAccount)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := cluster.StartProcess("csi-node-router-"+strings.ReplaceAll(t.Name(), "/", "-"), filepath.Join(binDir, "csi-node-router"), []string{
		"--driver-name=" + r.driver, "--kubeconfig=" + kubeconfig, "--http-endpoint=" + addr,
		"--leader-election", "--leader-election-namespace=" + r.namespace, "--leader-election-lease-duration=4s",
		"--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms", "-v=3",
	}, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(15 * time.Second) })
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, _ := httpGet(ctx, "http://"+addr+"/readyz")
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("csi-node-router not ready: %v; the end of %s:\n%s", err, p.LogPath(), p.LogTail(20))
	}
	return p, "http://" + addr + "/metrics"
}

// httpGet returns the status and body of a GET of url.
func httpGet(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// noneUnplaced matches the router's metric when no PV waits for its node.
var noneUnplaced = regexp.MustCompile(`(?m)^csi_node_router_unplaced_volumes 0$`)

// waitUntil polls cond every 200 ms for up to a minute, failing the test
// with what when it does not hold by then.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
