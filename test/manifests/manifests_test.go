// Package manifests checks every shipped manifest against the local control
// plane: each kustomization under deploy/kubernetes (found, not listed; each
// component through the overlays that include it) and the example overlay
// of docs/install.md are rendered with the kustomize API and every object is
// created with a server-side dry run, so a manifest the apiserver rejects
// fails `make test`. Each is also built with the oldest kustomize
// docs/install.md supports (the nested module oldkustomize), which must
// give the same objects. The scheduler configurations are decoded and validated
// as kube-scheduler would, and every copy of the plugin's configuration must
// equal the component's but for the driver name. The node deployment's
// DaemonSet and the rules of its ServiceAccount are held to
// docs/node-deployment.md, and csi-node-router runs under its rendered
// rules, which must grant exactly the requests kube-apiserver's audit log
// shows it makes.
package manifests

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

var cluster *controlplane.Cluster

func TestMain(m *testing.M) {
	// The audit log records csi-node-router's requests only
	// (TestRouterRBACIsWhatItUses).
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{AuditPolicy: auditPolicy}, func(_ context.Context, c *controlplane.Cluster) error {
		cluster = c
		return nil
	}))
}

// render builds the kustomization in dir (absolute, or relative to the
// repo root).
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(cluster.RepoRoot, dir)
	}
	objs, err := controlplane.RenderKustomization(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := controlplane.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// dryRun creates the namespaces for real (namespaced objects need them) and
// every object with a server-side dry run.
func dryRun(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, real := range []bool{true, false} {
		for _, o := range objs {
			if (o.GetKind() == "Namespace") != real {
				continue
			}
			data, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if err := cluster.ApplyYAML(ctx, data, !real); err != nil {
				t.Errorf("%s %s/%s rejected by the apiserver: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
}

type kindName struct{ kind, namespace, name string }

func index(objs []*unstructured.Unstructured) map[kindName]*unstructured.Unstructured {
	out := map[kindName]*unstructured.Unstructured{}
	for _, o := range objs {
		out[kindName{o.GetKind(), o.GetNamespace(), o.GetName()}] = o
	}
	return out
}

// placeholder finds the base's placeholder driver name or image.
var placeholder = regexp.MustCompile(`(^|[^.a-z])csi\.example\.com|example\.com/csi-driver`)

// wantObjects are objects some kustomizations must render, by directory.
var wantObjects = map[string][]kindName{
	"deploy/kubernetes/base": {
		{"Namespace", "", "csi-topology"},
		{"Deployment", "csi-topology", "csi-controller"},
		{"DaemonSet", "csi-topology", "csi-node"},
		{"CSIDriver", "", "csi.example.com"},
		{"ServiceAccount", "csi-topology", "csi-provisioner"},
		{"ServiceAccount", "csi-topology", "csi-node-publisher"},
	},
	"deploy/kubernetes/overlays/mock": {
		{"Deployment", "csi-topology", "csi-controller"},
		{"DaemonSet", "csi-topology", "csi-node"},
		{"CSIDriver", "", "mock.csi.example.com"},
		{"StorageClass", "", "csi-zonal"},
		{"StorageClass", "", "csi-zonal-restricted"},
		{"StorageClass", "", "csi-immediate"},
		{"Deployment", "csi-topology", "csi-topology-scheduler"},
		{"ConfigMap", "csi-topology", "csi-topology-scheduler-config"},
		{"Deployment", "csi-topology", "csi-scheduler-extender"},
		{"Service", "csi-topology", "csi-scheduler-extender"},
		{"ServiceAccount", "csi-topology", "csi-topology-scheduler"},
		{"ServiceAccount", "csi-topology", "csi-scheduler-extender"},
		{"ConfigMap", "csi-topology", "mock-driver-config"},
	},
	"deploy/kubernetes/overlays/node-local": {
		{"DaemonSet", "csi-topology", "csi-node"},
		{"CSIDriver", "", "mock.csi.example.com"},
		{"StorageClass", "", "csi-node-local"},
		{"ServiceAccount", "csi-topology", "csi-node-provisioner"},
		{"ClusterRole", "", "csi-topology-node-provisioner"},
		{"Role", "csi-topology", "csi-topology-node-provisioner-capacity"},
		{"Deployment", "csi-topology", "csi-topology-scheduler"},
		{"ConfigMap", "csi-topology", "csi-topology-scheduler-config"},
	},
}

// TestKustomizations renders every kustomization under deploy/kubernetes
// that renders on its own and dry-runs its objects. Components render
// through the kustomizations that include them; one that none includes
// fails the test, so a new component cannot go unchecked.
func TestKustomizations(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	all := discoverKustomizations(t, cluster.RepoRoot)
	for dir := range wantObjects {
		if _, ok := all[dir]; !ok {
			t.Errorf("%s has no kustomization.yaml any more; update wantObjects", dir)
		}
	}
	dirs := slices.Sorted(maps.Keys(all))
	checked := map[string]bool{}
	for _, dir := range dirs {
		if all[dir].component {
			continue
		}
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			objs := render(t, dir)
			have := index(objs)
			for _, w := range wantObjects[dir] {
				if have[w] == nil {
					t.Errorf("%s renders no %s %s/%s", dir, w.kind, w.namespace, w.name)
				}
			}
			// An overlay installs a real driver: nothing of the base's
			// placeholder may remain.
			checkRendered(t, ctx, dir, objs, strings.HasPrefix(dir, "deploy/kubernetes/overlays/"))
		})
		for d := range reachable(all, dir) {
			checked[d] = true
		}
	}
	for _, dir := range dirs {
		if all[dir].component && !checked[dir] {
			t.Errorf("component %s is included by no kustomization under deploy/kubernetes, so nothing renders it: add it to an overlay", dir)
		}
	}
	if len(checked) == 0 {
		t.Error("no kustomization found under deploy/kubernetes")
	}
}

// checkRendered checks the rendered objects of what: no placeholder left
// (when noPlaceholder), every CSIDriver with storage capacity, the
// containers' security contexts as docs/install.md describes them, every
// copy of the scheduler configuration valid and equal to the component's
// but for the driver name; then it dry-runs them.
func checkRendered(t *testing.T, ctx context.Context, what string, objs []*unstructured.Unstructured, noPlaceholder bool) {
	t.Helper()
	for _, o := range objs {
		if noPlaceholder {
			data, _ := yaml.Marshal(o.Object)
			if m := placeholder.Find(data); m != nil {
				t.Errorf("%s: %s %s still names the placeholder %q", what, o.GetKind(), o.GetName(), m)
			}
		}
		switch o.GetKind() {
		case "CSIDriver":
			if v, _, _ := unstructured.NestedBool(o.Object, "spec", "storageCapacity"); !v {
				t.Errorf("%s: CSIDriver %s without storageCapacity: true", what, o.GetName())
			}
		case "Deployment", "DaemonSet":
			checkSecurityContexts(t, what, o)
		case "ConfigMap":
			if o.GetName() == "csi-topology-scheduler-config" {
				cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
				checkSchedulerConfigCopy(t, what+" ConfigMap csi-topology-scheduler-config", []byte(cfg))
			}
		}
	}
	dryRun(t, ctx, objs)
}

// checkSecurityContexts holds docs/install.md to its word: every container
// drops all capabilities, cannot escalate its privileges and has a read-only
// root file system, except the driver's node container, which mounts and is
// privileged.
func checkSecurityContexts(t *testing.T, what string, o *unstructured.Unstructured) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c, _ := c.(map[string]any)
		name, _, _ := unstructured.NestedString(c, "name")
		sc, _, _ := unstructured.NestedMap(c, "securityContext")
		if o.GetKind() == "DaemonSet" && o.GetName() == "csi-node" && name == "csi-driver" {
			continue
		}
		drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop")
		escalation, found, _ := unstructured.NestedBool(sc, "allowPrivilegeEscalation")
		readOnly, _, _ := unstructured.NestedBool(sc, "readOnlyRootFilesystem")
		privileged, _, _ := unstructured.NestedBool(sc, "privileged")
		if !slices.Equal(drop, []string{"ALL"}) || !found || escalation || !readOnly || privileged {
			t.Errorf("%s: container %s of %s %s: securityContext %v, want capabilities.drop [ALL], allowPrivilegeEscalation false, readOnlyRootFilesystem true",
				what, name, o.GetKind(), o.GetName(), sc)
		}
		checkUser(t, what, o, name, sc)
	}
}

// checkUser holds docs/install.md's "Images" to its word: the containers
// that use the driver's socket run as their image's user, root (as
// upstream's), with no user of their own in the manifests, which would hide
// whether the image as shipped connects; the schedulers say runAsNonRoot.
func checkUser(t *testing.T, what string, o *unstructured.Unstructured, name string, sc map[string]any) {
	t.Helper()
	// A decoded YAML number is a float64 or an int64.
	var user float64
	raw, hasUser := sc["runAsUser"]
	switch v := raw.(type) {
	case int64:
		user = float64(v)
	case float64:
		user = v
	}
	nonRoot, _, _ := unstructured.NestedBool(sc, "runAsNonRoot")
	switch name {
	case "csi-provisioner", "csi-node-publisher":
		if hasUser || nonRoot || imagebuild.UserOf(name) != imagebuild.RootUser {
			t.Errorf("%s: container %s of %s %s: securityContext %v, image user %s: want no runAsUser nor runAsNonRoot, the image's user root (the driver's socket)",
				what, name, o.GetKind(), o.GetName(), sc, imagebuild.UserOf(name))
		}
	case "csi-topology-scheduler", "csi-scheduler-extender":
		if !nonRoot || (hasUser && user == 0) {
			t.Errorf("%s: container %s of %s %s: securityContext %v, want runAsNonRoot true", what, name, o.GetKind(), o.GetName(), sc)
		}
	}
}

// TestPlainManifests dry-runs the manifests that are not kustomizations.
func TestPlainManifests(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeAll(t, data)
		if len(objs) == 0 {
			t.Errorf("%s has no objects", f)
		}
		dryRun(t, ctx, objs)
	}
}

// TestSchedulerConfigSnippet validates the extender snippet operators put
// into their kube-scheduler's --config.
func TestSchedulerConfigSnippet(t *testing.T) {
	f := filepath.Join(cluster.RepoRoot, "deploy", "kubernetes", "components", "scheduler-extender", "kube-scheduler-config.yaml")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := validateSchedulerConfig(t, f, data)
	if len(cfg.Extenders) != 1 || !cfg.Extenders[0].NodeCacheCapable || cfg.Extenders[0].FilterVerb != "filter" {
		t.Errorf("extender snippet: %+v", cfg.Extenders)
	}
}

// TestKindMatchesMockOverlay checks the quick start's two halves agree: kind
// names the workers <cluster>-worker, -worker2, ...; the mock overlay maps
// exactly those names to zones, and each worker's zone label matches.
func TestKindMatchesMockOverlay(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(cluster.RepoRoot, "deploy", "kind", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kind struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		Nodes      []struct {
			Role   string            `json:"role"`
			Labels map[string]string `json:"labels"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(data, &kind); err != nil {
		t.Fatalf("deploy/kind/cluster.yaml: %v", err)
	}
	if kind.Kind != "Cluster" || kind.APIVersion != "kind.x-k8s.io/v1alpha4" || kind.Name == "" {
		t.Fatalf("deploy/kind/cluster.yaml: kind %q name %q", kind.Kind, kind.Name)
	}
	wantZones := map[string]string{}
	workers := 0
	for _, n := range kind.Nodes {
		if n.Role != "worker" {
			continue
		}
		workers++
		name := kind.Name + "-worker"
		if workers > 1 {
			name += fmt.Sprint(workers)
		}
		wantZones[name] = n.Labels["topology.kubernetes.io/zone"]
	}
	var table string
	for _, o := range render(t, "deploy/kubernetes/overlays/mock") {
		if o.GetKind() == "ConfigMap" && o.GetName() == "mock-driver-config" {
			table, _, _ = unstructured.NestedString(o.Object, "data", "node-topology.yaml")
		}
	}
	var mapping map[string]map[string]string
	if err := yaml.UnmarshalStrict([]byte(table), &mapping); err != nil {
		t.Fatalf("node-topology.yaml of the mock overlay: %v", err)
	}
	got := map[string]string{}
	for node, seg := range mapping {
		got[node] = seg["zone"]
	}
	if diff := cmp.Diff(wantZones, got); diff != "" || workers != 3 {
		t.Errorf("kind workers (%d) and their zone labels vs the mock overlay's node-topology.yaml (-kind +overlay):\n%s", workers, diff)
	}
}
