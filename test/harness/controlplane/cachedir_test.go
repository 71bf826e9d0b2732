package controlplane

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCacheDirKey checks what the build cache's key depends on: the
// contents of the nested module's files, not where the module lives nor
// what its module line calls it, so that moving a nested module keeps its
// cached build, while a dependency bump or a new Go rebuilds.
func TestCacheDirKey(t *testing.T) {
	const (
		gomod = "module example.com/test/controlplane/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.36.3\n"
		gosum = "k8s.io/kubernetes v1.36.3 h1:abc=\n"
	)
	type module struct{ dir, gomod, gosum, salt string }
	base := module{dir: "test/controlplane/k8s", gomod: gomod, gosum: gosum, salt: "go1.26.8"}
	tests := []struct {
		name      string
		other     module
		wantEqual bool
	}{
		{name: "same module", other: base, wantEqual: true},
		{name: "moved, module line renamed", wantEqual: true, other: module{dir: "test/harness/controlplane/k8s",
			gomod: "module example.com/test/harness/controlplane/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.36.3\n",
			gosum: gosum, salt: base.salt}},
		{name: "dependency bumped", wantEqual: false, other: module{dir: base.dir,
			gomod: "module example.com/test/controlplane/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.36.4\n",
			gosum: gosum, salt: base.salt}},
		{name: "go.sum changed", wantEqual: false, other: module{dir: base.dir, gomod: gomod,
			gosum: "k8s.io/kubernetes v1.36.4 h1:def=\n", salt: base.salt}},
		{name: "another Go", wantEqual: false, other: module{dir: base.dir, gomod: gomod, gosum: gosum, salt: "go1.27.0"}},
	}
	key := func(t *testing.T, m module) string {
		t.Helper()
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, m.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"go.mod": m.gomod, "go.sum": m.gosum} {
			if err := os.WriteFile(filepath.Join(root, m.dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dir, err := CacheDir(root, "controlplane", m.salt, filepath.Join(m.dir, "go.mod"), filepath.Join(m.dir, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Base(dir)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := key(t, base), key(t, tc.other)
			if (a == b) != tc.wantEqual {
				t.Errorf("keys %s and %s: equal = %v, want %v", a, b, a == b, tc.wantEqual)
			}
		})
	}
}
