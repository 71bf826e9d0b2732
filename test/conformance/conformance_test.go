package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// parallel is how many cases run at once (each on both sides).
const parallel = 12

// difference is one field that differs between the sides in a case.
type difference struct {
	Case, Field, Ours, Upstream string
}

func (d difference) String() string {
	return fmt.Sprintf("%s: %s\n      ours:     %s\n      upstream: %s", d.Case, d.Field, d.Ours, d.Upstream)
}

// diffObservations returns the fields whose values differ, sorted.
func diffObservations(name string, o, u map[string]string) []difference {
	var out []difference
	for k, ov := range o {
		uv, ok := u[k]
		if !ok {
			uv = absent
		}
		if ov != uv {
			out = append(out, difference{name, k, ov, uv})
		}
	}
	for k, uv := range u {
		if _, ok := o[k]; !ok {
			out = append(out, difference{name, k, absent, uv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// TestConformance runs every case of the corpus on our csi-provisioner and
// on upstream's external-provisioner v6.3.0, side by side on one control
// plane, and fails on every difference the allowlist does not name, and on
// every allowlist entry that matched nothing. Then it compares the metrics.
func TestConformance(t *testing.T) {
	if env == nil {
		t.Fatal("no control plane (-update only rewrites the doc: run it with -run TestAllowlistDoc)")
	}
	var (
		mu    sync.Mutex
		diffs []difference
		ran   = map[string]bool{}
		cases []tcase
		mig   []tcase
	)
	for _, tc := range corpus() {
		if tc.profile == profileMigration {
			mig = append(mig, tc)
		} else {
			cases = append(cases, tc)
		}
	}
	t.Run("cases", func(t *testing.T) {
		sem := make(chan struct{}, parallel)
		for rep := 0; rep < *repeat; rep++ {
			for i, tc := range cases {
				name := tc.name
				if *repeat > 1 {
					name = fmt.Sprintf("%s#%d", tc.name, rep)
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					sem <- struct{}{}
					defer func() { <-sem }()
					d := runCase(t, tc, fmt.Sprintf("cf%d-%03d", rep, i))
					mu.Lock()
					defer mu.Unlock()
					ran[tc.name] = true
					diffs = append(diffs, d...)
				})
			}
		}
	})
	t.Run("migration", func(t *testing.T) {
		d := runMigration(t, mig)
		for _, tc := range mig {
			ran[tc.name] = true
		}
		diffs = append(diffs, d...)
	})
	checkAllowlist(t, diffs, func(name string) bool { return ran[name] })
	t.Run("metrics", testMetrics)
}

// runCase runs the case on both sides at once and returns the differences
// (with the case's name, not its namespace).
func runCase(t *testing.T, tc tcase, ns string) []difference {
	_, ctx := ktesting.NewTestContext(t)
	p := tc.profile
	if p == "" {
		p = profileDefault
	}
	obs := make([]map[string]string, len(sides))
	errs := make([]error, len(sides))
	var wg sync.WaitGroup
	for i, s := range sides {
		r := newRun(t, ctx, tc, ns, s, env.inst(p, s))
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs[i], errs[i] = r.execute(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", sides[i].name, err)
		}
	}
	return compare(t, tc, obs[0], obs[1])
}

// newRun returns the case's run on side s in namespace ns-<side>, cleaned
// up when t ends.
func newRun(t *testing.T, ctx context.Context, tc tcase, ns string, s side, in *instance) *run {
	r := &run{tc: tc, side: s, ns: ns + "-" + s.short, inst: in, uids: map[string]string{}}
	t.Cleanup(func() { r.cleanup(context.WithoutCancel(ctx)) })
	return r
}

// compare logs our observation when verbose and returns the differences.
func compare(t *testing.T, tc tcase, mine, theirs map[string]string) []difference {
	if testing.Verbose() {
		t.Logf("%s observed (ours):\n%s", tc.name, render(mine))
	}
	return diffObservations(tc.name, mine, theirs)
}

// render lists an observation one field a line, sorted.
func render(obs map[string]string) string {
	keys := make([]string, 0, len(obs))
	for k := range obs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s = %s\n", k, obs[k])
	}
	return b.String()
}
