package main

import (
	"slices"
	"strings"
	"testing"
)

// TestMarkdownBindThroughContender checks the table with and without the
// ours+bind contender: with it, ratios to ours+bind follow the rows of ours
// and theirs, and the binding table shows start -> all PVs, all Bound and
// the PV controller's writes; without it, neither appears.
func TestMarkdownBindThroughContender(t *testing.T) {
	run := func(contender string, toAllPVs, toAll, bindWrites float64) Result {
		return Result{Scenario: "burst", Contender: contender, Nodes: 3, Volumes: 500, Rep: 1, ToAllPVs: toAllPVs, ToAll: toAll,
			PVControllerBindPerVolume: bindWrites, PVControllerMarkPerVolume: 1,
			PVControllerWrites: map[string]int{"update persistentvolumeclaims (mark)": 500}, Failures: []string{}}
	}
	tests := []struct {
		name     string
		bind     bool
		runs     []Result
		want     []string
		unwanted []string
	}{
		{
			name: "with ours+bind",
			bind: true,
			runs: []Result{run(ours, 2, 12, 3), run(oursBind, 2, 2.2, 0), run(theirs, 4, 13, 3)},
			want: []string{"ours+bind: ours with --bind-through", "| 3 | ours+bind |", "| 3 | ours / ours+bind |", "| 3 | theirs / ours |",
				"| 3 | theirs / ours+bind |", "### Who binds the claims",
				"| burst | 3 | ours+bind | 2.00 | 2.20 | 1.10 | 0 | 0 | 0 | 1.00 | update persistentvolumeclaims (mark) 1.00 |",
				"| burst | 3 | ours / ours+bind | 1.00× | 5.45× |", "| burst | 3 | theirs / ours+bind | 2.00× | 5.91× |"},
		},
		{
			name:     "without",
			runs:     []Result{run(ours, 2, 12, 3), run(theirs, 4, 13, 3)},
			want:     []string{"| 3 | theirs / ours |"},
			unwanted: []string{"ours+bind", "Who binds the claims"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Options: Options{Claims: 500, Reps: 1, Compare: "/upstream/csi-provisioner", BindThroughContender: tc.bind}, Runs: tc.runs}
			table := r.Markdown()
			for _, w := range tc.want {
				if !strings.Contains(table, w) {
					t.Errorf("table lacks %q:\n%s", w, table)
				}
			}
			for _, u := range tc.unwanted {
				if strings.Contains(table, u) {
					t.Errorf("table has %q:\n%s", u, table)
				}
			}
		})
	}
}

// TestParseFlagsBindThroughContender checks that the ours+bind contender
// is opt-in.
func TestParseFlagsBindThroughContender(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"default", nil, false},
		{"set", []string{"--bind-through-contender"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--bin-dir="}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			if o.BindThroughContender != tc.want {
				t.Errorf("BindThroughContender %v, want %v", o.BindThroughContender, tc.want)
			}
		})
	}
}

// TestParseFlagsControllerManagerQPS checks kube-controller-manager's API
// rate limit: its defaults (no flag) with the ours+bind contender, whose
// figures are who binds the claims at a stock cluster's pace; 2000 without
// it; and what the table says of it.
func TestParseFlagsControllerManagerQPS(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantQPS   int
		wantFlags []string
		wantTable string
	}{
		{name: "default", wantQPS: 2000, wantFlags: []string{"--kube-api-qps=2000", "--kube-api-burst=4000"},
			wantTable: "kube-controller-manager: --kube-api-qps=2000 --kube-api-burst=4000."},
		{name: "ours+bind", args: []string{"--bind-through-contender"}, wantQPS: 0,
			wantTable: "kube-controller-manager: its default API rate limit (--kube-api-qps=20 --kube-api-burst=30), as in a stock cluster."},
		{name: "ours+bind, fast", args: []string{"--bind-through-contender", "--controller-manager-qps=2000"}, wantQPS: 2000,
			wantFlags: []string{"--kube-api-qps=2000", "--kube-api-burst=4000"}},
		{name: "defaults asked", args: []string{"--controller-manager-qps=0"}, wantQPS: 0},
		{name: "another rate", args: []string{"--controller-manager-qps=100"}, wantQPS: 100,
			wantFlags: []string{"--kube-api-qps=100", "--kube-api-burst=200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--bin-dir="}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			if o.ControllerManagerQPS != tc.wantQPS {
				t.Errorf("ControllerManagerQPS %d, want %d", o.ControllerManagerQPS, tc.wantQPS)
			}
			if got := controllerManagerArgs(o.ControllerManagerQPS); !slices.Equal(got, tc.wantFlags) {
				t.Errorf("kube-controller-manager's flags %q, want %q", got, tc.wantFlags)
			}
			if table := (&Report{Options: o}).Markdown(); !strings.Contains(table, tc.wantTable) {
				t.Errorf("table lacks %q:\n%s", tc.wantTable, table)
			}
		})
	}
}
