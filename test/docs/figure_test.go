package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// figureWidth is where the figure's lines wrap.
const figureWidth = 116

// TestDesignPackageFigure keeps the figure of docs/design.md section 6 (the
// code block above the package table) true: it is generated from go list,
// every package of the module outside test/ with the packages of ours it
// imports. `go test ./test/docs -update` rewrites it.
func TestDesignPackageFigure(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	graph := map[string][]string{}
	for p, imports := range ourPackages(t, root) {
		if !strings.HasPrefix(p, "test/") {
			graph[p] = imports
		}
	}
	file := filepath.Join(root, "docs", "design.md")
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := renderFigure(graph)
	if *update {
		updated, err := replaceFigure(string(doc), want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	open, closing, err := figureBounds(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(doc[open:closing])); diff != "" {
		t.Errorf("docs/design.md section 6's figure does not match go list (-go list +docs); run go test ./test/docs -update:\n%s", diff)
	}
}

// TestDesignPackageFigureRenders checks the figure of a small graph, and
// that a stale figure is found and replaced.
func TestDesignPackageFigureRenders(t *testing.T) {
	graph := map[string][]string{
		"cmd/a":           {"pkg/core", "internal/log", "internal/client"},
		"cmd/b":           {"pkg/front"},
		"pkg/front":       {"pkg/core"},
		"pkg/core":        {"pkg/topology"},
		"pkg/topology":    nil,
		"internal/log":    nil,
		"internal/client": nil,
	}
	want := strings.Join([]string{
		"cmd/a ------> pkg/core, internal/{client,log}",
		"cmd/b ------> pkg/front",
		"",
		"pkg/front --> pkg/core",
		"",
		"pkg/core ---> pkg/topology",
		"",
		"import nothing of ours: pkg/topology, internal/{client,log}",
		"",
	}, "\n")
	got := renderFigure(graph)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("renderFigure (-want +got):\n%s", diff)
	}
	doc := "# D\n\n## 6. Packages\n\n```\ncmd/a --> pkg/old\n```\n\n| package |\n\n## 7. Next\n\n```\nkept\n```\n"
	replaced, err := replaceFigure(doc, want)
	if err != nil {
		t.Fatal(err)
	}
	if wantDoc := "# D\n\n## 6. Packages\n\n```\n" + want + "```\n\n| package |\n\n## 7. Next\n\n```\nkept\n```\n"; replaced != wantDoc {
		t.Errorf("replaceFigure = %q, want %q", replaced, wantDoc)
	}
	if _, err := replaceFigure("## 6. Packages\n\nno figure\n\n## 7. Next\n", want); err == nil {
		t.Error("replaceFigure found a figure in a section without one")
	}
}

// replaceFigure returns doc with the first code block of its section 6
// replaced by figure.
func replaceFigure(doc, figure string) (string, error) {
	open, closing, err := figureBounds(doc)
	if err != nil {
		return "", err
	}
	return doc[:open] + figure + doc[closing:], nil
}

// figureBounds returns where the text of the first code block of doc's
// section 6 starts and ends.
func figureBounds(doc string) (open, closing int, err error) {
	start := strings.Index(doc, "\n## 6.")
	if start < 0 {
		return 0, 0, fmt.Errorf("docs/design.md has no section 6")
	}
	end := len(doc)
	if i := strings.Index(doc[start+1:], "\n## "); i >= 0 {
		end = start + 1 + i
	}
	open = strings.Index(doc[start:end], "\n```\n")
	if open < 0 {
		return 0, 0, fmt.Errorf("docs/design.md section 6 has no figure (a ``` block)")
	}
	open += start + len("\n```\n")
	closing = strings.Index(doc[open:end], "```\n")
	if closing < 0 {
		return 0, 0, fmt.Errorf("docs/design.md section 6: the figure's block does not end")
	}
	return open, open + closing, nil
}

// renderFigure draws graph (package -> the packages of ours it imports)
// as one line per importing package, "p --> what it imports", importers
// above what they import: packages no one imports first, then a blank line
// and those only they import, and so on (a package sits one level below its
// lowest importer). A last line names the packages that import nothing of
// ours. Imports from one directory are written dir/{a,b}.
func renderFigure(graph map[string][]string) string {
	level := figureLevels(graph)
	var rows, leaves []string
	for p := range graph {
		if len(graph[p]) == 0 {
			leaves = append(leaves, p)
		} else {
			rows = append(rows, p)
		}
	}
	slices.SortFunc(rows, func(a, b string) int {
		if level[a] != level[b] {
			return level[a] - level[b]
		}
		return strings.Compare(a, b)
	})
	width := 0
	for _, p := range rows {
		width = max(width, len(p))
	}
	var b strings.Builder
	for i, p := range rows {
		if i > 0 && level[p] != level[rows[i-1]] {
			b.WriteString("\n")
		}
		head := p + " " + strings.Repeat("-", width-len(p)+2) + "> "
		writeWrapped(&b, head, groupByDir(graph[p]))
	}
	if len(rows) > 0 {
		b.WriteString("\n")
	}
	writeWrapped(&b, "import nothing of ours: ", groupByDir(leaves))
	return b.String()
}

// figureLevels gives every package of graph its level: 0 when no package
// imports it, else one more than its lowest importer's.
func figureLevels(graph map[string][]string) map[string]int {
	level := map[string]int{}
	var visit func(p string, seen map[string]bool) int
	importers := map[string][]string{}
	for p, imports := range graph {
		for _, imp := range imports {
			importers[imp] = append(importers[imp], p)
		}
	}
	visit = func(p string, seen map[string]bool) int {
		if l, ok := level[p]; ok {
			return l
		}
		if seen[p] { // an import cycle, which Go refuses: keep going
			return 0
		}
		seen[p] = true
		l := 0
		for _, imp := range importers[p] {
			l = max(l, visit(imp, seen)+1)
		}
		level[p] = l
		return l
	}
	for p := range graph {
		visit(p, map[string]bool{})
	}
	return level
}

// groupByDir sorts pkgs, pkg/ first, then internal/, then the rest, and
// writes those of one directory as dir/{a,b}.
func groupByDir(pkgs []string) []string {
	byDir := map[string][]string{}
	for _, p := range pkgs {
		dir := path.Dir(p)
		byDir[dir] = append(byDir[dir], path.Base(p))
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	rank := func(d string) int {
		switch {
		case d == "pkg" || strings.HasPrefix(d, "pkg/"):
			return 0
		case d == "internal" || strings.HasPrefix(d, "internal/"):
			return 1
		}
		return 2
	}
	slices.SortFunc(dirs, func(a, b string) int {
		if rank(a) != rank(b) {
			return rank(a) - rank(b)
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, d := range dirs {
		names := byDir[d]
		slices.Sort(names)
		if len(names) == 1 {
			out = append(out, d+"/"+names[0])
			continue
		}
		out = append(out, d+"/{"+strings.Join(names, ",")+"}")
	}
	return out
}

// writeWrapped writes head and items joined by ", ", wrapping before
// figureWidth with continuation lines indented under the first item.
func writeWrapped(b *strings.Builder, head string, items []string) {
	line := head
	for i, item := range items {
		sep := ""
		if i < len(items)-1 {
			sep = ","
		}
		if i > 0 && len(line)+1+len(item)+len(sep) > figureWidth {
			b.WriteString(line + "\n")
			line = strings.Repeat(" ", len(head)) + item + sep
			continue
		}
		if i > 0 {
			line += " "
		}
		line += item + sep
	}
	b.WriteString(line + "\n")
}
