package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// maxFuncLines is the longest a non-test function may be, from its func
// line to its closing brace (docs/design.md, "Names in the code").
const maxFuncLines = 80

// TestFunctionLength fails for every function or method of a non-test Go
// file of the repository (nested modules included, caches and testdata
// excluded) that is longer than maxFuncLines: a newcomer reads a function
// whole.
func TestFunctionLength(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	long := longFunctions(t, root, maxFuncLines)
	for _, f := range long {
		t.Errorf("%s: split it (at most %d lines)", f, maxFuncLines)
	}
}

// TestFunctionLengthFindsLong checks that longFunctions counts what it
// should on a file written for the purpose.
func TestFunctionLengthFindsLong(t *testing.T) {
	dir := t.TempDir()
	body := "package x\n\nfunc short() {\n}\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 10) + "}\n"
	for name, text := range map[string]string{
		"x.go":      body,
		"x_test.go": "package x\n\nfunc longTest() {\n" + strings.Repeat("\t_ = 1\n", 10) + "}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := longFunctions(t, dir, 5)
	if len(got) != 1 || !strings.Contains(got[0], "x.go:6 long is 12 lines") {
		t.Errorf("longFunctions = %q, want only long (12 lines) of x.go", got)
	}
}

// longFunctions lists "path:line name is N lines" for every function
// over max lines in the non-test Go files under root.
func longFunctions(t *testing.T, root string, max int) []string {
	t.Helper()
	fset := token.NewFileSet()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "testdata", "bin", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := end - start + 1; n > max {
				out = append(out, rel+":"+strconv.Itoa(start)+" "+fd.Name.Name+" is "+strconv.Itoa(n)+" lines")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
