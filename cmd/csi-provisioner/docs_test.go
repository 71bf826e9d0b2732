package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated tables of docs/migrating.md from upstreamFlags and upstreamGates")

const migratingDoc = "../../docs/migrating.md"

// generatedSections are the parts of docs/migrating.md written from the
// tables in code, each between "<!-- BEGIN <name> -->" and "<!-- END <name> -->".
var generatedSections = map[string]func() string{
	"upstream flags": renderUpstreamFlags,
	"feature gates":  renderUpstreamGates,
}

// docDefault writes a default for a Markdown table.
func docDefault(s string) string {
	if s == "" {
		return "(empty)"
	}
	return "`" + s + "`"
}

// statusWords says a status in the words of docs/migrating.md.
var statusWords = map[compatStatus]string{
	compatSame:        "same",
	compatAdded:       "same (new)",
	compatDiffers:     "**differs**",
	compatIgnored:     "accepted, no effect",
	compatDefaultOnly: "**refused** unless at the default",
}

func renderUpstreamFlags() string {
	var b strings.Builder
	b.WriteString("| upstream flag | upstream default | ours | status | why / how |\n|---|---|---|---|---|\n")
	for _, u := range upstreamFlags {
		ours := "same"
		if u.ourDefault != "" {
			ours = docDefault(u.ourDefault)
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s |\n", u.name, docDefault(u.upstreamDefault), ours, statusWords[u.status], u.note)
	}
	return b.String()
}

func renderUpstreamGates() string {
	var b strings.Builder
	b.WriteString("| gate | upstream default | accepted values | what they do here |\n|---|---|---|---|\n")
	for _, g := range upstreamGates {
		values := make([]string, 0, len(g.supported))
		for _, v := range g.supported {
			values = append(values, fmt.Sprintf("`%t`", v))
		}
		fmt.Fprintf(&b, "| `%s` | `%t` | %s | %s |\n", g.name, g.upstreamDefault, strings.Join(values, ", "), g.note)
	}
	return b.String()
}

// docs/migrating.md shows the tables of upstreamFlags and upstreamGates as
// they are; regenerate them with go test ./cmd/csi-provisioner/ -update.
func TestMigratingDoc(t *testing.T) {
	data, err := os.ReadFile(migratingDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for name, render := range generatedSections {
		begin, end := "<!-- BEGIN "+name+" -->\n", "<!-- END "+name+" -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s has no section %q ... %q", migratingDoc, begin, end)
		}
		got, want := doc[i+len(begin):j], render()
		if *updateDocs {
			doc = doc[:i+len(begin)] + want + doc[j:]
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("section %q of %s is stale (-code +doc); run go test ./cmd/csi-provisioner/ -update:\n%s", name, migratingDoc, diff)
		}
	}
	if *updateDocs {
		if err := os.WriteFile(migratingDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
