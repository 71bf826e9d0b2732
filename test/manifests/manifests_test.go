// Package manifests checks every shipped manifest against the local control
// plane: each kustomization under deploy/kubernetes is rendered with the
// kustomize API and every object is created with a server-side dry run, so
// a manifest the apiserver rejects fails `make test`. The scheduler
// configurations are decoded and validated as kube-scheduler would.
package manifests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/controlplane"
)

var cluster *controlplane.Cluster

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{}, func(_ context.Context, c *controlplane.Cluster) error {
		cluster = c
		return nil
	}))
}

// render builds the kustomization in dir (relative to the repo root).
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(cluster.RepoRoot, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	data, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, data)
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatal(err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
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

func TestKustomizations(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		dir  string
		want []kindName
		// mock: the overlay must not keep the base's placeholders.
		mock bool
	}{
		{dir: "deploy/kubernetes/base", want: []kindName{
			{"Namespace", "", "csi-topology"},
			{"Deployment", "csi-topology", "csi-controller"},
			{"DaemonSet", "csi-topology", "csi-node"},
			{"CSIDriver", "", "csi.example.com"},
			{"ServiceAccount", "csi-topology", "csi-provisioner"},
			{"ServiceAccount", "csi-topology", "csi-node-publisher"},
		}},
		{dir: "deploy/kubernetes/overlays/mock", mock: true, want: []kindName{
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
		}},
	} {
		t.Run(strings.ReplaceAll(tc.dir, "/", "_"), func(t *testing.T) {
			objs := render(t, tc.dir)
			have := index(objs)
			for _, w := range tc.want {
				if have[w] == nil {
					t.Errorf("%s renders no %s %s/%s", tc.dir, w.kind, w.namespace, w.name)
				}
			}
			if tc.mock {
				for _, o := range objs {
					data, _ := yaml.Marshal(o.Object)
					if m := placeholder.Find(data); m != nil {
						t.Errorf("%s %s still names the placeholder %q", o.GetKind(), o.GetName(), m)
					}
				}
				if d := have[kindName{"CSIDriver", "", "mock.csi.example.com"}]; d != nil {
					if v, _, _ := unstructured.NestedBool(d.Object, "spec", "storageCapacity"); !v {
						t.Error("CSIDriver without storageCapacity: true")
					}
				}
			}
			for _, o := range objs {
				if o.GetKind() == "ConfigMap" && o.GetName() == "csi-topology-scheduler-config" {
					cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
					validateSchedulerConfig(t, tc.dir+" ConfigMap csi-topology-scheduler-config", []byte(cfg))
				}
			}
			dryRun(t, ctx, objs)
		})
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
