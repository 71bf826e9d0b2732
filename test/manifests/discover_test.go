package manifests

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kustomization is one kustomization.yaml under deploy/kubernetes.
type kustomization struct {
	// dir is its directory relative to the repo root, slash-separated.
	dir string
	// component is true for kind Component, which renders only through a
	// Kustomization that lists it.
	component bool
	// includes are the directories of its resources and components that are
	// local directories, relative to the repo root.
	includes []string
}

// discoverKustomizations finds every directory under deploy/kubernetes that
// holds a kustomization.yaml, by directory.
func discoverKustomizations(t *testing.T, root string) map[string]kustomization {
	t.Helper()
	out := map[string]kustomization{}
	err := filepath.WalkDir(filepath.Join(root, "deploy", "kubernetes"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() != "kustomization.yaml" {
			return err
		}
		k, err := readKustomization(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		out[k.dir] = k
		return nil
	})
	if err != nil {
		t.Fatalf("discovering the kustomizations: %v", err)
	}
	return out
}

// readKustomization reads the kustomization.yaml of dir (absolute).
func readKustomization(root, dir string) (kustomization, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return kustomization{}, err
	}
	var f struct {
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Components []string `json:"components"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return kustomization{}, err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return kustomization{}, err
	}
	k := kustomization{dir: filepath.ToSlash(rel), component: f.Kind == "Component"}
	for _, r := range append(f.Resources, f.Components...) {
		if strings.Contains(r, "://") {
			continue // remote: not ours to check
		}
		p := filepath.Join(dir, r)
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue // a file, or missing: kustomize reports that when rendering
		}
		if rel, err := filepath.Rel(root, p); err == nil {
			k.includes = append(k.includes, filepath.ToSlash(rel))
		}
	}
	return k, nil
}

// reachable returns dir and every kustomization directory it includes,
// directly or through others.
func reachable(all map[string]kustomization, dir string) map[string]bool {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(d string) {
		if seen[d] {
			return
		}
		seen[d] = true
		for _, inc := range all[d].includes {
			visit(inc)
		}
	}
	visit(dir)
	return seen
}
