package manifests

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// oldestRendering is what test/manifests/oldkustomize prints: the
// kustomize/api version it is built with and, by directory, the YAML or
// the error.
type oldestRendering struct {
	API     string `json:"api"`
	Results []struct {
		Dir   string `json:"dir"`
		YAML  string `json:"yaml"`
		Error string `json:"error"`
	} `json:"results"`
}

// renderOldest renders dirs (absolute) with the oldest supported kustomize:
// `go run .` in the nested module test/manifests/oldkustomize, which
// requires that version (the project's go.mod keeps its own).
func renderOldest(t *testing.T, dirs []string) oldestRendering {
	t.Helper()
	cmd, cleanup := controlplane.GoCommand(t.Context(), filepath.Join(cluster.RepoRoot, "test", "manifests", "oldkustomize"), append([]string{"run", "."}, dirs...)...)
	defer cleanup()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run test/manifests/oldkustomize: %v\n%s", err, stderr.Bytes())
	}
	var r oldestRendering
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the output of test/manifests/oldkustomize: %v", err)
	}
	if len(r.Results) != len(dirs) {
		t.Fatalf("test/manifests/oldkustomize rendered %d directories, want %d", len(r.Results), len(dirs))
	}
	return r
}

// TestOldestKustomize builds every kustomization under deploy/kubernetes
// that renders on its own (components through the overlays that include
// them) and the example overlay of docs/install.md with the oldest
// kustomize docs/install.md supports, the one in kubectl 1.27, and requires
// the objects the project's kustomize renders (which the other tests
// dry-run), object for object: an overlay that only the newest kustomize
// builds, or builds differently, fails here. docs/install.md must name the
// version tested.
func TestOldestKustomize(t *testing.T) {
	all := discoverKustomizations(t, cluster.RepoRoot)
	var dirs []string
	for _, dir := range slices.Sorted(maps.Keys(all)) {
		if !all[dir].component {
			dirs = append(dirs, filepath.Join(cluster.RepoRoot, dir))
		}
	}
	overlay, _ := writeInstallDocOverlay(t)
	dirs = append(dirs, overlay)
	oldest := renderOldest(t, dirs)

	doc, err := os.ReadFile(filepath.Join(cluster.RepoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "`sigs.k8s.io/kustomize/api` " + oldest.API; !strings.Contains(string(doc), want) {
		t.Errorf("docs/install.md does not name the oldest kustomize tested, %s", want)
	}

	for i, dir := range dirs {
		name := "docs/install.md's overlay"
		if rel, err := filepath.Rel(cluster.RepoRoot, dir); err == nil && dir != overlay {
			name = filepath.ToSlash(rel)
		}
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			r := oldest.Results[i]
			if r.Error != "" {
				t.Fatalf("kustomize/api %s cannot build %s: %s", oldest.API, name, r.Error)
			}
			diffObjects(t, name, oldest.API, decodeAll(t, []byte(r.YAML)), render(t, dir))
		})
	}
}

// diffObjects reports every object that only one of the two renderings of
// what has, and every object that differs between them.
func diffObjects(t *testing.T, what, oldAPI string, old, current []*unstructured.Unstructured) {
	t.Helper()
	o, c := index(old), index(current)
	for _, k := range slices.SortedFunc(maps.Keys(c), compareKindName) {
		if o[k] == nil {
			t.Errorf("%s: kustomize/api %s renders no %s %s/%s", what, oldAPI, k.kind, k.namespace, k.name)
			continue
		}
		if d := cmp.Diff(c[k].Object, o[k].Object); d != "" {
			t.Errorf("%s: %s %s/%s differs with kustomize/api %s (-current +oldest):\n%s", what, k.kind, k.namespace, k.name, oldAPI, d)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(o), compareKindName) {
		if c[k] == nil {
			t.Errorf("%s: only kustomize/api %s renders %s %s/%s", what, oldAPI, k.kind, k.namespace, k.name)
		}
	}
	if len(old) != len(o) || len(current) != len(c) {
		t.Errorf("%s renders an object twice: %d and %d objects, %d and %d distinct", what, len(old), len(current), len(o), len(c))
	}
}

func compareKindName(a, b kindName) int {
	return strings.Compare(a.kind+"/"+a.namespace+"/"+a.name, b.kind+"/"+b.namespace+"/"+b.name)
}
