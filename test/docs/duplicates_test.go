package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// notDuplicates are suite functions named like a harness export that do
// another job, each with why ("<suite dir>.<function>": reason). An entry
// that no longer matches fails TestSuitesUseHarness, so the list stays short.
var notDuplicates = map[string]string{
	"test/conformance.setup":       "starts the differential harness (both provisioners per profile), not lab.Setup's deployment",
	"test/conformance.volumeName":  "a profile's volume name (its prefix and UID length), not lab.VolumeName's defaults",
	"test/docs.describe":           "words a design.md row, not lab.Describe's namespace dump",
	"test/e2enode.labelSelection":  "reads the suite's selection from the environment, to configure the lab with",
	"test/e2erealnode.startDriver": "a driver pod on a real kubelet node, not a heartbeat node's mock driver process",
	"test/e2erecord.describe":      "words a count of API calls, not lab.Describe's namespace dump",
	"test/manifests.startRouter":   "csi-node-router under the RBAC of the manifest being checked, not the lab's",
}

// TestSuitesUseHarness fails when a test suite (a _test.go file under test/
// outside test/harness) defines a function named like one the harness
// (test/harness/lab, controlplane, kubeletnode) exports, e.g. its own
// newClaim beside lab.NewClaim, without calling it: the suites share the
// harness's helpers instead of growing copies that drift. A suite's adapter
// (repoRoot calling controlplane.RepoRoot) is fine; a function that only
// shares the name goes in notDuplicates, with why.
func TestSuitesUseHarness(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range duplicateHelpers(t, root) {
		if _, ok := notDuplicates[d.key()]; ok {
			seen[d.key()] = true
			continue
		}
		t.Errorf("%s: %s rewrites %s: call it instead (or, if it does another job, add it to notDuplicates with why)", d.pos, d.name, d.export)
	}
	for key := range notDuplicates {
		if !seen[key] {
			t.Errorf("notDuplicates names %s, which no longer shares a name with a harness export: remove it", key)
		}
	}
}

// TestSuitesUseHarnessFindsCopies checks duplicateHelpers on a tree written
// for the purpose: a rewrite is found; an adapter, a method, a harness
// test's helper and an unrelated name are not.
func TestSuitesUseHarnessFindsCopies(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"test/harness/lab/objects.go":  "package lab\n\nfunc NewClaim() {}\nfunc WaitBound() {}\nfunc (l *Lab) AddNode() {}\nfunc helper() {}\n",
		"test/harness/lab/lab_test.go": "package lab\n\nfunc newClaim() {}\n",
		"test/harness/cmd/run/main.go": "package main\n\nfunc Main() {}\n",
		"test/e2ex/helpers_test.go": "package e2ex\n\nfunc newClaim() { create() }\n" +
			"func waitBound() { lab.WaitBound() }\n" +
			"func addNode() { env.AddNode() }\n" +
			"func (w *world) newClaim() {}\n" +
			"func helper() {}\nfunc main() {}\n",
		"test/e2ex/doc.go": "package e2ex\n\nfunc newClaim() {}\n",
	}
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, d := range duplicateHelpers(t, root) {
		got = append(got, d.key()+" "+d.export)
	}
	want := []string{"test/e2ex.newClaim lab.NewClaim"}
	if !slices.Equal(got, want) {
		t.Errorf("duplicateHelpers = %q, want %q", got, want)
	}
}

// duplicate is a suite function named like a harness export.
type duplicate struct {
	pos    string // file:line
	dir    string // the suite's directory, relative to the repository
	name   string // the suite's function
	export string // the harness's, as pkg.Name or pkg.Type.Name
}

func (d duplicate) key() string { return d.dir + "." + d.name }

// duplicateHelpers lists the package-level functions of the _test.go files
// under root/test, outside test/harness, whose name is, but for the case
// of its first letter, an exported function or method of a harness library
// (a non-main package under test/harness), and which do not call it.
func duplicateHelpers(t *testing.T, root string) []duplicate {
	t.Helper()
	exports := harnessExports(t, filepath.Join(root, "test", "harness"))
	var out []duplicate
	walkGo(t, filepath.Join(root, "test"), func(p string, f *ast.File, fset *token.FileSet) {
		rel, _ := filepath.Rel(root, p)
		if !strings.HasSuffix(p, "_test.go") || strings.HasPrefix(filepath.ToSlash(rel), "test/harness/") {
			return
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil {
				continue
			}
			export, ok := exports[strings.ToLower(fd.Name.Name)]
			if !ok || callsNamed(fd.Body, export[strings.LastIndex(export, ".")+1:]) {
				continue
			}
			pos := fset.Position(fd.Pos())
			out = append(out, duplicate{pos: rel + ":" + strconv.Itoa(pos.Line), dir: filepath.ToSlash(filepath.Dir(rel)),
				name: fd.Name.Name, export: export})
		}
	})
	return out
}

// harnessExports maps the lower-cased name of every exported function and
// method of the libraries under dir (their non-test files, package main
// left out) to pkg.Name or pkg.Type.Name.
func harnessExports(t *testing.T, dir string) map[string]string {
	t.Helper()
	exports := map[string]string{}
	walkGo(t, dir, func(p string, f *ast.File, _ *token.FileSet) {
		if strings.HasSuffix(p, "_test.go") || f.Name.Name == "main" {
			return
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := f.Name.Name + "." + fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = f.Name.Name + "." + receiverType(fd.Recv.List[0].Type) + "." + fd.Name.Name
			}
			exports[strings.ToLower(fd.Name.Name)] = name
		}
	})
	return exports
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// callsNamed reports whether body calls a function or method named name.
func callsNamed(body *ast.BlockStmt, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			found = found || fn.Name == name
		case *ast.SelectorExpr:
			found = found || fn.Sel.Name == name
		}
		return !found
	})
	return found
}

// walkGo parses every Go file under dir (testdata, nested modules' caches
// and hidden directories left out) in lexical order and calls fn on it.
func walkGo(t *testing.T, dir string, fn func(path string, f *ast.File, fset *token.FileSet)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(p, f, fset)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
