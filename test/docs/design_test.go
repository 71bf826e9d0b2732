package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// designRow is one row of docs/design.md section 6, "Packages and what each
// may import": the packages it names (a path, dir/* for the packages right
// below dir, dir/... for a whole subtree) and the packages of ours they may
// import (any: "everything").
type designRow struct {
	patterns []string
	allowed  []string
	any      bool
}

var backticked = regexp.MustCompile("`([^`]+)`")

// ourPrefixes are the module's top-level directories that hold packages.
var ourPrefixes = []string{"pkg/", "internal/", "cmd/", "mock-driver/", "test/", "tools/"}

func isOurs(p string) bool {
	for _, prefix := range ourPrefixes {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// designTable reads the package table of section 6 of docs/design.md.
func designTable(t *testing.T, root string) []designRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []designRow
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## 6.")
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) < 5 {
			t.Fatalf("docs/design.md section 6: row without three columns: %s", line)
		}
		var r designRow
		for _, m := range backticked.FindAllStringSubmatch(cols[1], -1) {
			r.patterns = append(r.patterns, m[1])
		}
		r.any = strings.Contains(cols[3], "everything")
		for _, m := range backticked.FindAllStringSubmatch(cols[3], -1) {
			if isOurs(m[1]) && !strings.HasSuffix(m[1], "/") {
				r.allowed = append(r.allowed, m[1])
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md has no package table in section 6")
	}
	return rows
}

// matchPattern reports whether package p (module-relative) is named by
// pattern: itself, dir/* (one level below dir) or dir/... (dir and below).
func matchPattern(pattern, p string) bool {
	switch {
	case strings.HasSuffix(pattern, "/..."):
		dir := strings.TrimSuffix(pattern, "/...")
		return p == dir || strings.HasPrefix(p, dir+"/")
	case strings.HasSuffix(pattern, "/*"):
		dir := strings.TrimSuffix(pattern, "/*")
		return strings.HasPrefix(p, dir+"/") && !strings.Contains(strings.TrimPrefix(p, dir+"/"), "/")
	default:
		return p == pattern
	}
}

// ourPackages lists the module's packages (module-relative) with the
// packages of ours each imports outside its tests.
func ourPackages(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd, cleanup := controlplane.GoCommand(context.Background(), root, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	defer cleanup()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mod := "github.com/csi-topology-provisioner/csi-topology-provisioner/"
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		p := strings.TrimPrefix(fields[0], mod)
		var imports []string
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, mod) {
				imports = append(imports, strings.TrimPrefix(imp, mod))
			}
		}
		pkgs[p] = imports
	}
	return pkgs
}

// TestDesignPackageTable keeps docs/design.md's package table true: every
// package of the module is in it, every package it names exists, and no
// package imports one of ours that its row does not allow.
func TestDesignPackageTable(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rows := designTable(t, root)
	pkgs := ourPackages(t, root)
	for _, r := range rows {
		for _, pattern := range r.patterns {
			found := false
			for p := range pkgs {
				found = found || matchPattern(pattern, p)
			}
			if !found {
				t.Errorf("docs/design.md section 6 names %s, which is no package of the module (go list ./...)", pattern)
			}
		}
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		row := rowOf(rows, p)
		if row == nil {
			t.Errorf("package %s is missing from docs/design.md section 6 (add a row: its job and what it may import)", p)
			continue
		}
		if row.any {
			continue
		}
		for _, imp := range pkgs[p] {
			if !allowedImport(*row, imp) {
				t.Errorf("%s imports %s, which docs/design.md section 6 does not allow it (%s)", p, imp, describe(*row))
			}
		}
	}
}

// rowOf returns the row naming p: an exact name wins over a pattern.
func rowOf(rows []designRow, p string) *designRow {
	for i := range rows {
		if slices.Contains(rows[i].patterns, p) {
			return &rows[i]
		}
	}
	for i := range rows {
		for _, pattern := range rows[i].patterns {
			if matchPattern(pattern, p) {
				return &rows[i]
			}
		}
	}
	return nil
}

// allowedImport reports whether a package of row may import imp: one the
// row lists, or a package of its own patterns (e.g. mock-driver/... among
// themselves).
func allowedImport(r designRow, imp string) bool {
	for _, a := range append(slices.Clone(r.allowed), r.patterns...) {
		if matchPattern(a, imp) {
			return true
		}
	}
	return false
}

func describe(r designRow) string {
	if len(r.allowed) == 0 {
		return "nothing of ours"
	}
	return fmt.Sprintf("only %s", strings.Join(r.allowed, ", "))
}
