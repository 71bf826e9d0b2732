package conformance

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// labelSets scrapes the side's provisioner of profile p and returns, per
// metric name, its label-name sets ("a,b,c").
func labelSets(t *testing.T, p profile, s side) map[string][]string {
	_, ctx := ktesting.NewTestContext(t)
	out := map[string][]string{}
	m, err := lab.Scrape(ctx, env.inst(p, s).metricsURL)
	if err != nil {
		t.Fatalf("%s (%s): %v", s.name, p, err)
	}
	for name, samples := range m {
		for _, sample := range samples {
			var labels []string
			for l := range sample.Metric {
				if l != "__name__" {
					labels = append(labels, string(l))
				}
			}
			sort.Strings(labels)
			set := strings.Join(labels, ",")
			if !slices.Contains(out[name], set) {
				out[name] = append(out[name], set)
			}
		}
	}
	return out
}

// testMetrics checks, after the corpus ran, that in every profile every
// metric upstream serves is served by ours with each of upstream's
// label-name sets, unless the allowlist names it; and that every metrics
// entry still allows something.
func testMetrics(t *testing.T) {
	used := map[int]bool{}
	var missing []string
	ps := make([]string, 0, len(profiles))
	for p := range profiles {
		ps = append(ps, string(p))
	}
	sort.Strings(ps)
	for _, p := range ps {
		up, mine := labelSets(t, profile(p), upstream), labelSets(t, profile(p), ours)
		names := make([]string, 0, len(up))
		for name := range up {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for _, set := range up[name] {
				if slices.Contains(mine[name], set) {
					continue
				}
				i := slices.IndexFunc(allowlist, func(a allowed) bool { return a.Case == metricsCase && match(a.Field, name) })
				if i >= 0 {
					used[i] = true
					continue
				}
				missing = append(missing, p+": "+name+"{"+set+"} (ours: "+strings.Join(mine[name], " | ")+")")
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("upstream metrics that ours does not serve with the same label names (fix ours, or allowlist them):\n  %s",
			strings.Join(missing, "\n  "))
	}
	for i, a := range allowlist {
		if a.Case == metricsCase && !used[i] && !a.Timing {
			t.Errorf("allowlist entry for metric %q matched nothing: remove it (%s)", a.Field, a.Reason)
		}
	}
}
