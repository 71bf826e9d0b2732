package manifests

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// nodeDeploymentComponent is the component that turns the base into a node
// deployment of csi-provisioner (docs/node-deployment.md).
const nodeDeploymentComponent = "deploy/kubernetes/components/node-deployment"

// grants are API permissions by scope ("" for cluster-wide, else a
// namespace), then resource ("resource" for the core group, else
// "resource.group"), then verbs, sorted.
type grants map[string]map[string][]string

// add grants verbs on resource in scope.
func (g grants) add(scope, resource string, verbs ...string) {
	if g[scope] == nil {
		g[scope] = map[string][]string{}
	}
	v := append(g[scope][resource], verbs...)
	slices.Sort(v)
	g[scope][resource] = slices.Compact(v)
}

// union returns the grants of g and o together.
func (g grants) union(o grants) grants {
	out := grants{}
	for _, x := range []grants{g, o} {
		for scope, rs := range x {
			for r, verbs := range rs {
				out.add(scope, r, verbs...)
			}
		}
	}
	return out
}

// has tells whether verb on resource is granted in scope.
func (g grants) has(scope, resource, verb string) bool {
	return slices.Contains(g[scope][resource], verb)
}

// nodeProvisionerGrants is what a per-node csi-provisioner may do, and all
// it may do (docs/node-deployment.md, "RBAC"; the contract of issue 14),
// with its capacity objects in capacityNamespace: no Lease (no leader
// election), no Deployment (the capacity objects are owned by the Node), no
// list or watch of secrets. The data sources' rules are the central
// provisioner's.
func nodeProvisionerGrants(capacityNamespace string) grants {
	g := grants{}
	g.add("", "persistentvolumeclaims", "get", "list", "watch", "update", "patch")
	g.add("", "persistentvolumes", "get", "list", "watch", "create", "delete", "patch")
	g.add("", "storageclasses.storage.k8s.io", "get", "list", "watch")
	g.add("", "nodes", "get", "list", "watch")
	g.add("", "csinodes.storage.k8s.io", "get", "list", "watch")
	g.add("", "volumeattachments.storage.k8s.io", "list", "watch")
	g.add("", "events", "create", "patch")
	g.add("", "secrets", "get")
	// Data sources and VolumeAttributesClasses, as base/provisioner-rbac.yaml.
	g.add("", "volumesnapshots.snapshot.storage.k8s.io", "list", "watch", "update")
	g.add("", "volumesnapshotcontents.snapshot.storage.k8s.io", "list", "watch")
	g.add("", "volumeattributesclasses.storage.k8s.io", "list", "watch")
	g.add(capacityNamespace, "csistoragecapacities.storage.k8s.io", "get", "list", "watch", "create", "update", "delete")
	// The pod's own, for --capacity-ownerref-level=1, upstream's default:
	// upstream's image swapped back in exits at start without it.
	g.add(capacityNamespace, "pods", "get")
	return g
}

// publisherRoleName tells the roles of csi-node-publisher (the base's
// node-publisher-rbac.yaml) from the provisioner's.
func publisherRoleName(name string) bool {
	return strings.HasPrefix(name, "csi-topology-node-publisher")
}

// nodeDeploymentOverlays are the kustomizations that include the
// node-deployment component, and what each overlay's driver container must
// be started with. Every such kustomization must be listed here.
var nodeDeploymentOverlays = []struct {
	dir string
	// driverArgs are arguments the driver's container in the DaemonSet
	// must have.
	driverArgs []string
}{
	{
		dir: "deploy/kubernetes/overlays/node-local",
		driverArgs: []string{
			"--mode=both",
			"--node-id=$(NODE_NAME)",
			"--node-topology=kubernetes.io/hostname=$(NODE_NAME)",
			"--capacity-bytes=107374182400",
		},
	},
}

// TestNodeDeployment checks every kustomization that includes the
// node-deployment component: csi-provisioner runs in a DaemonSet beside the
// driver with --node-deployment, NODE_NAME from spec.nodeName and no leader
// election, no Deployment runs it, and its ServiceAccount has exactly the
// per-node provisioner's rules and csi-node-publisher's, nothing else.
func TestNodeDeployment(t *testing.T) {
	all := discoverKustomizations(t, cluster.RepoRoot)
	listed := map[string]bool{}
	for _, o := range nodeDeploymentOverlays {
		listed[o.dir] = true
		if k, ok := all[o.dir]; !ok || !reachable(all, o.dir)[nodeDeploymentComponent] || k.component {
			t.Errorf("%s is no kustomization that includes %s; update nodeDeploymentOverlays", o.dir, nodeDeploymentComponent)
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(all)) {
		if !all[dir].component && reachable(all, dir)[nodeDeploymentComponent] && !listed[dir] {
			t.Errorf("%s includes %s but is not in nodeDeploymentOverlays: add it", dir, nodeDeploymentComponent)
		}
	}
	publisher := publisherGrants(t, render(t, "deploy/kubernetes/base"))

	for _, o := range nodeDeploymentOverlays {
		t.Run(strings.ReplaceAll(o.dir, "/", "_"), func(t *testing.T) {
			objs := render(t, o.dir)
			ds, provisioner := provisionerDaemonSet(t, objs)
			if ds == nil {
				t.Fatalf("%s renders no DaemonSet with a csi-provisioner container", o.dir)
			}
			pod := ds.Spec.Template.Spec

			t.Run("provisioner container", func(t *testing.T) {
				checkNodeProvisionerContainer(t, provisioner)
			})
			t.Run("upstream's image swapped back in", func(t *testing.T) {
				checkUpstreamTakesNodeArgs(t, provisioner)
			})
			t.Run("driver beside it", func(t *testing.T) {
				i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "csi-driver" })
				if i < 0 {
					t.Fatalf("DaemonSet %s has no csi-driver container", ds.Name)
				}
				driver := pod.Containers[i]
				for _, a := range o.driverArgs {
					if !slices.Contains(driver.Args, a) {
						t.Errorf("csi-driver of DaemonSet %s: args %q lack %q", ds.Name, driver.Args, a)
					}
				}
				if !sharesMount(provisioner, driver, "/csi") {
					t.Errorf("csi-provisioner and csi-driver of DaemonSet %s do not share the volume of the socket directory /csi", ds.Name)
				}
				if env := envFrom(driver, "NODE_NAME"); env != "spec.nodeName" {
					t.Errorf("csi-driver of DaemonSet %s: NODE_NAME from %q, want spec.nodeName", ds.Name, env)
				}
			})
			t.Run("no central provisioner", func(t *testing.T) {
				for _, obj := range objs {
					if obj.GetKind() == "DaemonSet" {
						continue
					}
					containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
					for _, c := range containers {
						name, _, _ := unstructured.NestedString(c.(map[string]any), "name")
						image, _, _ := unstructured.NestedString(c.(map[string]any), "image")
						if name == "csi-provisioner" || strings.Contains(image, "/csi-provisioner:") {
							t.Errorf("%s %s runs csi-provisioner (%s); node deployment runs it only in the DaemonSet", obj.GetKind(), obj.GetName(), image)
						}
					}
				}
			})
			t.Run("class", func(t *testing.T) {
				checkNodeLocalClass(t, objs)
			})

			sa := pod.ServiceAccountName
			have := index(objs)
			if have[kindName{"ServiceAccount", ds.Namespace, sa}] == nil {
				t.Fatalf("DaemonSet %s runs as ServiceAccount %q, which the kustomization does not render", ds.Name, sa)
			}
			prov, pub := effectiveGrants(t, objs, ds.Namespace, sa)
			want := nodeProvisionerGrants(capacityNamespace(provisioner, ds.Namespace))

			t.Run("provisioner RBAC is the contract's", func(t *testing.T) {
				if diff := cmp.Diff(want, prov); diff != "" {
					t.Errorf("rules bound to ServiceAccount %s/%s outside csi-node-publisher's roles (-want +granted):\n%s", ds.Namespace, sa, diff)
				}
			})
			t.Run("publisher RBAC is the base's", func(t *testing.T) {
				if diff := cmp.Diff(publisher, pub); diff != "" {
					t.Errorf("csi-node-publisher's rules bound to ServiceAccount %s/%s differ from the base's csi-node-publisher (-base +granted):\n%s", ds.Namespace, sa, diff)
				}
			})
			granted := prov.union(pub)
			for _, f := range []struct {
				name, scope, resource string
				verbs                 []string
			}{
				{"no leases cluster-wide", "", "leases.coordination.k8s.io", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{"no listing of leases", ds.Namespace, "leases.coordination.k8s.io", []string{"list", "watch", "delete", "deletecollection"}},
				{"no listing of secrets", "", "secrets", []string{"list", "watch", "create", "update", "patch", "delete"}},
				{"no deployments", ds.Namespace, "deployments.apps", []string{"get", "list", "watch"}},
				{"no capacity objects cluster-wide", "", "csistoragecapacities.storage.k8s.io", []string{"get", "list", "watch", "create", "update", "delete"}},
				{"no pods", "", "pods", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			} {
				t.Run(f.name, func(t *testing.T) {
					for _, v := range f.verbs {
						if granted.has(f.scope, f.resource, v) {
							t.Errorf("ServiceAccount %s/%s may %s %s (scope %q)", ds.Namespace, sa, v, f.resource, f.scope)
						}
					}
				})
			}
			t.Run("provisioner has no lease", func(t *testing.T) {
				for scope, rs := range prov {
					if _, ok := rs["leases.coordination.k8s.io"]; ok {
						t.Errorf("the provisioner's roles grant leases (scope %q): node deployment has no leader election", scope)
					}
				}
			})
		})
	}
}

// provisionerDaemonSet finds the DaemonSet with a csi-provisioner container,
// and that container.
func provisionerDaemonSet(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.DaemonSet, corev1.Container) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
			t.Fatalf("DaemonSet %s: %v", o.GetName(), err)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "csi-provisioner" {
				return &ds, c
			}
		}
	}
	return nil, corev1.Container{}
}

// checkNodeProvisionerContainer checks the flags and environment of a
// per-node csi-provisioner: --node-deployment, NODE_NAME from the pod's
// spec.nodeName (required by --node-deployment), NAMESPACE from its
// metadata.namespace, capacity tracking on without an owner Deployment, and
// no leader election (refused with --node-deployment).
func checkNodeProvisionerContainer(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, want := range []struct {
		name string
		ok   func(args []string) bool
	}{
		{"--node-deployment", func(a []string) bool {
			return slices.Contains(a, "--node-deployment") || slices.Contains(a, "--node-deployment=true")
		}},
		{"--enable-capacity", func(a []string) bool {
			return slices.Contains(a, "--enable-capacity") || slices.Contains(a, "--enable-capacity=true")
		}},
		{"no --leader-election", func(a []string) bool {
			return !slices.ContainsFunc(a, func(s string) bool {
				return (s == "--leader-election" || strings.HasPrefix(s, "--leader-election=")) && s != "--leader-election=false"
			})
		}},
		{"no --capacity-owner-deployment", func(a []string) bool {
			return !slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--capacity-owner-deployment") })
		}},
	} {
		if !want.ok(c.Args) {
			t.Errorf("csi-provisioner args %q: want %s", c.Args, want.name)
		}
	}
	for name, field := range map[string]string{"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace"} {
		if got := envFrom(c, name); got != field {
			t.Errorf("csi-provisioner: %s from %q, want the downward API's %s", name, got, field)
		}
	}
}

// envFrom returns the field path the downward API gives the container's
// variable name, "" when it has none.
func envFrom(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

// sharesMount tells whether a and b mount the same volume, a at path.
func sharesMount(a, b corev1.Container, path string) bool {
	for _, m := range a.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		return slices.ContainsFunc(b.VolumeMounts, func(o corev1.VolumeMount) bool { return o.Name == m.Name })
	}
	return false
}

// capacityNamespace is where the container publishes capacity objects:
// --capacity-namespace, $(NAMESPACE) being the pod's namespace, which is
// also the default.
func capacityNamespace(c corev1.Container, podNamespace string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--capacity-namespace="); ok {
			return strings.ReplaceAll(v, "$(NAMESPACE)", podNamespace)
		}
	}
	return podNamespace
}

// checkNodeLocalClass checks that a WaitForFirstConsumer class of the
// rendered CSIDriver is there, for node-local volumes.
func checkNodeLocalClass(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var drivers []string
	for _, o := range objs {
		if o.GetKind() == "CSIDriver" {
			drivers = append(drivers, o.GetName())
		}
	}
	if len(drivers) != 1 {
		t.Fatalf("want one CSIDriver, got %q", drivers)
	}
	for _, o := range objs {
		if o.GetKind() != "StorageClass" {
			continue
		}
		p, _, _ := unstructured.NestedString(o.Object, "provisioner")
		mode, _, _ := unstructured.NestedString(o.Object, "volumeBindingMode")
		if p == drivers[0] && mode == string(storagev1.VolumeBindingWaitForFirstConsumer) {
			return
		}
	}
	t.Errorf("no WaitForFirstConsumer StorageClass of driver %s", drivers[0])
}

// publisherGrants are the rules the base binds to csi-node-publisher's
// ServiceAccount.
func publisherGrants(t *testing.T, base []*unstructured.Unstructured) grants {
	t.Helper()
	var ds *appsv1.DaemonSet
	for _, o := range base {
		if o.GetKind() == "DaemonSet" && o.GetName() == "csi-node" {
			ds = &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil {
		t.Fatal("the base renders no DaemonSet csi-node")
	}
	prov, pub := effectiveGrants(t, base, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName)
	if len(prov) != 0 || len(pub) == 0 {
		t.Fatalf("the base's node DaemonSet's ServiceAccount has rules outside csi-node-publisher's roles (%v) or none of them", prov)
	}
	return pub
}

// effectiveGrants resolves the (Cluster)RoleBindings of the rendered
// objects that name the ServiceAccount namespace/name, and returns what they
// grant it: by csi-node-publisher's roles (pub), and by every other role
// (prov). A binding to a role the objects do not render, a wildcard, a
// non-resource URL or a rule limited to resourceNames fails the test: the
// grants could not be compared.
func effectiveGrants(t *testing.T, objs []*unstructured.Unstructured, namespace, name string) (prov, pub grants) {
	t.Helper()
	prov, pub = grants{}, grants{}
	roles := map[kindName]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			roles[kindName{o.GetKind(), o.GetNamespace(), o.GetName()}] = o
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == name && s.Namespace == namespace
		}) {
			continue
		}
		scope := ""
		if o.GetKind() == "RoleBinding" {
			scope = o.GetNamespace()
		}
		roleNS := ""
		if b.RoleRef.Kind == "Role" {
			roleNS = o.GetNamespace()
		}
		ro := roles[kindName{b.RoleRef.Kind, roleNS, b.RoleRef.Name}]
		if ro == nil {
			t.Errorf("%s %s binds %s/%s to %s %s, which is not rendered: its rules cannot be checked", o.GetKind(), o.GetName(), namespace, name, b.RoleRef.Kind, b.RoleRef.Name)
			continue
		}
		var role rbacv1.ClusterRole // a Role has the same rules
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ro.Object, &role); err != nil {
			t.Fatalf("%s %s: %v", ro.GetKind(), ro.GetName(), err)
		}
		into := prov
		if publisherRoleName(role.Name) {
			into = pub
		}
		for _, r := range role.Rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("%s %s: rule %+v names URLs or objects; add their comparison to this test", ro.GetKind(), ro.GetName(), r)
				continue
			}
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					if group == rbacv1.APIGroupAll || res == rbacv1.ResourceAll || slices.Contains(r.Verbs, rbacv1.VerbAll) {
						t.Errorf("%s %s grants a wildcard: %+v", ro.GetKind(), ro.GetName(), r)
					}
					key := res
					if group != "" {
						key += "." + group
					}
					into.add(scope, key, r.Verbs...)
				}
			}
		}
	}
	return prov, pub
}
