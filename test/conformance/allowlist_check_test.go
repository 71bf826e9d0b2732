package conformance

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/controlplane"
)

var update = flag.Bool("update", false, "rewrite the differences section of docs/migrating.md from the allowlist")

// allowed is one known difference between ours and upstream.
type allowed struct {
	// Case and Field are patterns of a case name (or "metrics") and a
	// field path; '*' matches any text.
	Case, Field string
	// Reason says why the difference is acceptable, for a vendor; "BUG: "
	// marks one to fix in our code.
	Reason string
}

// metricsCase is the Case of allowlist entries about metrics: Field is then
// the metric name.
const metricsCase = "metrics"

// match reports whether pattern, with '*' matching any text, matches s.
func match(pattern, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*") + "$"
	ok, _ := regexp.MatchString(re, s)
	return ok
}

// allowedBy returns the index of the first entry allowing d, or -1.
func allowedBy(d difference) int {
	for i, a := range allowlist {
		if a.Case != metricsCase && match(a.Case, d.Case) && match(a.Field, d.Field) {
			return i
		}
	}
	return -1
}

// checkAllowlist fails the test on every difference no entry allows, and on
// every entry (other than metrics) that allows nothing although a case it
// names ran.
func checkAllowlist(t *testing.T, diffs []difference, ran func(string) bool) {
	t.Helper()
	used := make([]bool, len(allowlist))
	var unlisted []string
	for _, d := range diffs {
		if i := allowedBy(d); i >= 0 {
			used[i] = true
			continue
		}
		unlisted = append(unlisted, d.String())
	}
	if len(unlisted) > 0 {
		t.Errorf("%d differences from upstream v6.3.0 that test/conformance/allowlist_test.go does not list "+
			"(fix ours, or add an entry with a reason):\n  %s", len(unlisted), strings.Join(unlisted, "\n  "))
	}
	for i, a := range allowlist {
		if a.Case == metricsCase || used[i] {
			continue
		}
		for _, tc := range corpus() {
			if match(a.Case, tc.name) && ran(tc.name) {
				t.Errorf("allowlist entry {Case: %q, Field: %q} matched no difference: remove it (%s)", a.Case, a.Field, a.Reason)
				break
			}
		}
	}
}

// docHeading starts the section of docs/migrating.md rendered from the
// allowlist; it ends at the next "## " heading.
const docHeading = "## Differences measured against upstream v6.3.0"

// renderDoc renders the allowlist as the section of docs/migrating.md.
func renderDoc() string {
	var b strings.Builder
	b.WriteString(docHeading + "\n\n")
	b.WriteString("`test/conformance` (`make conformance`) runs the same corpus of StorageClasses, claims, data sources and\n" +
		"deletions through upstream's external-provisioner v6.3.0 and through csi-provisioner, both against the mock\n" +
		"driver on one control plane, and compares the CSI requests, the PVs, the claims, the Events and the metrics.\n" +
		"Both run under upstream's unmodified `deploy/kubernetes/rbac.yaml`, plus one ClusterRole with what a vendor of\n" +
		"upstream adds for the features the corpus uses: `get`/`list` on secrets and `get` on volumeattributesclasses.\n" +
		"CSI migration cases run both sides, one after the other, as `ebs.csi.aws.com` with in-tree `kubernetes.io/aws-ebs`\n" +
		"classes and PVs.\n" +
		"Every difference it measures is listed here, one line each (case, field, why); the test fails on any other\n" +
		"difference and on a line that no longer matches. Generated from `test/conformance/allowlist_test.go` by\n" +
		"`go test ./test/conformance -run TestAllowlistDoc -update`.\n\n")
	for _, a := range allowlist {
		if a.Case == metricsCase {
			fmt.Fprintf(&b, "- metric `%s`: %s\n", a.Field, a.Reason)
			continue
		}
		fmt.Fprintf(&b, "- `%s`, `%s`: %s\n", a.Case, a.Field, a.Reason)
	}
	if len(allowlist) == 0 {
		b.WriteString("None.\n")
	}
	return b.String()
}

// docSection splits doc around the rendered section: before, the section,
// after (the section is empty when the heading is missing).
func docSection(doc string) (before, section, after string) {
	i := strings.Index(doc, "\n"+docHeading+"\n")
	if i < 0 {
		return doc, "", ""
	}
	before, rest := doc[:i+1], doc[i+1:]
	if j := strings.Index(rest[len(docHeading):], "\n## "); j >= 0 {
		cut := len(docHeading) + j + 1
		return before, strings.TrimRight(rest[:cut], "\n") + "\n", "\n" + rest[cut:]
	}
	return before, strings.TrimRight(rest, "\n") + "\n", ""
}

// The differences section of docs/migrating.md is the rendering of the
// allowlist; -update rewrites it (appending it when missing).
func TestAllowlistDoc(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "migrating.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, section, after := docSection(string(data))
	want := renderDoc()
	if *update {
		if section == "" {
			before = strings.TrimRight(before, "\n") + "\n\n"
		}
		if err := os.WriteFile(path, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, section); diff != "" {
		t.Errorf("docs/migrating.md %q does not match the allowlist (-allowlist +doc); run "+
			"go test ./test/conformance -run TestAllowlistDoc -update:\n%s", docHeading, diff)
	}
}

// Every allowlist entry has a case, a field and a reason, and the patterns
// match the cases they are meant for.
func TestAllowlistEntries(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range corpus() {
		if names[tc.name] {
			t.Errorf("two cases named %s", tc.name)
		}
		names[tc.name] = true
	}
	for _, a := range allowlist {
		if a.Case == "" || a.Field == "" || len(a.Reason) < 10 {
			t.Errorf("entry %+v: needs a case, a field and a reason", a)
			continue
		}
		if a.Case == metricsCase {
			continue
		}
		n := 0
		for name := range names {
			if match(a.Case, name) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("entry {Case: %q, Field: %q} names no case of the corpus", a.Case, a.Field)
		}
	}
	for _, m := range []struct {
		pattern, s string
		want       bool
	}{{"a*", "abc", true}, {"*.x", "a.x", true}, {"*.x", "a-x", false}, {"a", "ab", false}} {
		if got := match(m.pattern, m.s); got != m.want {
			t.Errorf("match(%q, %q) = %v", m.pattern, m.s, got)
		}
	}
}
