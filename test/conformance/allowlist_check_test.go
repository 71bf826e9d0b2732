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

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

var update = flag.Bool("update", false, "rewrite the differences section of docs/migrating.md from the allowlist")

// allowed is one known difference between ours and upstream.
type allowed struct {
	// Case and Field are patterns of a case name (or "metrics") and a
	// field path; '*' matches any text.
	Case, Field string
	// Binding, when set, limits the entry to the cases whose class binds
	// so (bindImmediate, bindDelayed): a difference of placement that
	// Immediate binding allows must not hide a wrong WaitForFirstConsumer
	// placement.
	Binding binding
	// Ours, when set, is a pattern our value must match, in which
	// {upstream} stands for upstream's value: "{upstream}: *" allows ours
	// to add to upstream's text, and nothing else.
	Ours string
	// Timing marks a difference that depends on timing (an upstream race):
	// the entry is not required to match in every run.
	Timing bool
	// Reason says why the difference is acceptable, for a vendor; "BUG: "
	// marks one to fix in our code.
	Reason string
}

// binding is a class's volume binding mode, as the allowlist names it.
type binding string

const (
	bindImmediate binding = "Immediate"
	bindDelayed   binding = "WaitForFirstConsumer"
)

// bindingOf is the binding mode of the corpus's case named name ("" when
// no case has the name).
func bindingOf(name string) binding {
	for _, tc := range corpus() {
		switch {
		case tc.name != name:
		case tc.class.wffc:
			return bindDelayed
		default:
			return bindImmediate
		}
	}
	return ""
}

// admits reports whether the entry allows the difference d.
func (a allowed) admits(d difference) bool {
	return a.Case != metricsCase && match(a.Case, d.Case) && match(a.Field, d.Field) &&
		(a.Binding == "" || a.Binding == bindingOf(d.Case)) &&
		(a.Ours == "" || match(strings.ReplaceAll(a.Ours, "{upstream}", d.Upstream), d.Ours))
}

// metricsCase is the Case of allowlist entries about metrics: Field is then
// the metric name.
const metricsCase = "metrics"

// match reports whether pattern, with '*' matching any text and "[1..]"
// any index but 0 ("preferred[1..]"), matches s.
func match(pattern, s string) bool {
	re := strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*")
	re = strings.ReplaceAll(re, `\[1\.\.\]`, `\[[1-9][0-9]*\]`)
	ok, _ := regexp.MatchString("^"+re+"$", s)
	return ok
}

// allowedBy returns the index of the first entry allowing d, or -1.
func allowedBy(d difference) int {
	for i, a := range allowlist {
		if a.admits(d) {
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
		if a.Case == metricsCase || used[i] || a.Timing {
			continue
		}
		for _, tc := range corpus() {
			if match(a.Case, tc.name) && (a.Binding == "" || a.Binding == bindingOf(tc.name)) && ran(tc.name) {
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
		"upstream adds for the features the corpus uses: `get`/`list` on secrets, `get`/`list`/`watch` on referencegrants\n" +
		"and `get` on volumeattributesclasses. Beside the default flags, profiles run parts of the corpus again with\n" +
		"`--strict-topology`, `--immediate-topology=false`, `--volume-name-prefix=k8s --volume-name-uuid-length=10`,\n" +
		"`--default-fstype=ext4`, `--controller-publish-readonly`, `--enable-capacity`, `--leader-election` and\n" +
		"`--node-deployment`, and with a mock driver whose `Probe` takes 3 s (both sides bound their start-up `Probe` by\n" +
		"`--timeout`), and the metrics of each profile are compared. kube-apiserver runs with\n" +
		"`CrossNamespaceVolumeDataSource`, and the cross-namespace cases run upstream with that gate and a ReferenceGrant.\n" +
		"Event messages are compared by shape (names, UIDs and numbers normalised); a WaitForFirstConsumer claim's\n" +
		"placement is never listed.\n" +
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
		fmt.Fprintf(&b, "- `%s`%s, `%s`%s: %s\n", a.Case, bindingNote(a.Binding), a.Field, oursNote(a.Ours), a.Reason)
	}
	if len(allowlist) == 0 {
		b.WriteString("None.\n")
	}
	return b.String()
}

func bindingNote(b binding) string {
	if b == "" {
		return ""
	}
	return " (" + string(b) + " binding only)"
}

func oursNote(ours string) string {
	if ours == "" {
		return ""
	}
	return " (ours: `" + ours + "`)"
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
			if match(a.Case, name) && (a.Binding == "" || a.Binding == bindingOf(name)) {
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
	}{{"a*", "abc", true}, {"*.x", "a.x", true}, {"*.x", "a-x", false}, {"a", "ab", false},
		{"p[1..].s", "p[1].s", true}, {"p[1..].s", "p[12].s", true}, {"p[1..].s", "p[0].s", false}} {
		if got := match(m.pattern, m.s); got != m.want {
			t.Errorf("match(%q, %q) = %v", m.pattern, m.s, got)
		}
	}
}

// A WaitForFirstConsumer claim's placement is never allowlisted: the
// selected node's segment is preferred[0] on both sides, and the PV's node
// affinity and the mock driver's segment attribute name it; Immediate
// claims may differ in all three.
func TestAllowlistKeepsDelayedPlacement(t *testing.T) {
	fields := []string{
		"calls.CreateVolume[0].accessibilityRequirements.preferred[0].segments[" + zoneKey + "]",
		"pv.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]",
		"pv.spec.csi.volumeAttributes[mock.csi.example.com/segment]",
	}
	delayed, immediate := 0, 0
	for _, tc := range corpus() {
		for _, f := range fields {
			i := allowedBy(difference{Case: tc.name, Field: f})
			switch {
			case tc.class.wffc && i >= 0:
				t.Errorf("%s (WaitForFirstConsumer): %s is allowed by entry {Case: %q, Field: %q}", tc.name, f, allowlist[i].Case, allowlist[i].Field)
			case !tc.class.wffc && i < 0 && strings.HasPrefix(tc.name, "topology/default/immediate"):
				t.Errorf("%s (Immediate): %s is not allowed", tc.name, f)
			}
		}
		if tc.class.wffc {
			delayed++
		} else {
			immediate++
		}
	}
	if delayed == 0 || immediate == 0 {
		t.Errorf("the corpus has %d delayed and %d immediate cases; want both", delayed, immediate)
	}
}
