package controlplane

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/modfile"
)

// versionsOf returns the version each required module resolves to,
// replacements applied.
func versionsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range f.Require {
		out[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if r.New.Version != "" {
			out[r.Old.Path] = r.New.Version
		}
	}
	return out
}

// TestNestedModuleSharesVersions keeps Kubernetes compiled once: every module
// that both the project and the control-plane module require must resolve to
// the same version in both, except the CSI spec (the reason the nested module
// exists). Bumping a dependency of the root module without bumping it in
// test/controlplane/k8s fails here; fix it with
// `cd test/controlplane/k8s && go get <module>@<root's version> && go mod tidy`.
func TestNestedModuleSharesVersions(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := versionsOf(t, filepath.Join(root, "go.mod"))
	got := versionsOf(t, filepath.Join(root, "test", "controlplane", "k8s", "go.mod"))
	allowed := map[string]bool{"github.com/container-storage-interface/spec": true}
	for mod, v := range got {
		if rv, ok := want[mod]; ok && rv != v && !allowed[mod] {
			t.Errorf("%s: test/controlplane/k8s resolves %s, the project %s", mod, v, rv)
		}
	}
}
