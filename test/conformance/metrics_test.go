package conformance

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/lab"
)

// labelSets scrapes the side's provisioners of every profile and returns,
// per metric name, its label-name sets ("a,b,c").
func labelSets(t *testing.T, s side) map[string][]string {
	_, ctx := ktesting.NewTestContext(t)
	out := map[string][]string{}
	for p := range profiles {
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
	}
	return out
}

// testMetrics checks, after the corpus ran, that every metric upstream
// serves is served by ours with each of upstream's label-name sets, unless
// the allowlist names it; and that every metrics entry still allows
// something.
func testMetrics(t *testing.T) {
	up, mine := labelSets(t, upstream), labelSets(t, ours)
	used := map[int]bool{}
	var missing []string
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
			missing = append(missing, name+"{"+set+"} (ours: "+strings.Join(mine[name], " | ")+")")
		}
	}
	if len(missing) > 0 {
		t.Errorf("upstream metrics that ours does not serve with the same label names (fix ours, or allowlist them):\n  %s",
			strings.Join(missing, "\n  "))
	}
	for i, a := range allowlist {
		if a.Case == metricsCase && !used[i] {
			t.Errorf("allowlist entry for metric %q matched nothing: remove it (%s)", a.Field, a.Reason)
		}
	}
}
