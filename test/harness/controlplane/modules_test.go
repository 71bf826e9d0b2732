package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// buildModules maps every package that `go list -deps` of targets in dir
// builds to its module as the go command sees it: path and version as
// required, and the replacement. Two builds share a package in the build
// cache only if all of these are equal: with -trimpath the file names
// compiled in carry the required version, not the replacement's.
func buildModules(t *testing.T, dir string, targets ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	cmd, cleanup := goCommand(ctx, dir, append([]string{"list", "-deps", "-f",
		"{{.ImportPath}} {{with .Module}}{{.Path}}@{{.Version}}{{with .Replace}} => {{.Path}}@{{.Version}}{{end}}{{end}}"}, targets...)...)
	defer cleanup()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps in %s: %v", dir, err)
	}
	pkgs := map[string]string{}
	for line := range strings.Lines(string(out)) {
		path, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
		pkgs[path] = mod
	}
	return pkgs
}

// TestNestedModuleSharesVersions keeps Kubernetes compiled once: every
// package that both the project's build (its commands, libraries and test
// helpers) and the control plane's build (test/harness/controlplane/k8s) compile
// must come from the same module version, required and replaced alike,
// except the CSI spec (the reason the nested module exists). Otherwise the
// go command compiles it twice, and a cold `make test` spends minutes on
// Kubernetes libraries it has already compiled. Bumping a dependency of the
// root module without bumping it in test/harness/controlplane/k8s fails here; fix it
// with `cd test/harness/controlplane/k8s && go mod edit -require=<module>@<root's
// version> [-replace=...] && go mod tidy` (or raise the root's when the
// nested module needs more).
func TestNestedModuleSharesVersions(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	project := buildModules(t, root, "./...")
	controlPlane := buildModules(t, filepath.Join(root, "test", "harness", "controlplane", "k8s"), controlPlaneTargets...)
	const allowed = "github.com/container-storage-interface/spec@"
	shared := 0
	for pkg, mod := range controlPlane {
		rootMod, ok := project[pkg]
		if !ok {
			continue
		}
		shared++
		if rootMod != mod && !strings.HasPrefix(mod, allowed) {
			t.Errorf("package %s: test/harness/controlplane/k8s builds it from %s, the project from %s", pkg, mod, rootMod)
		}
	}
	if shared < 100 {
		t.Errorf("only %d packages in common between the project and the control plane: is the comparison broken?", shared)
	}
	t.Logf("%d packages compiled once for both builds", shared)
}
