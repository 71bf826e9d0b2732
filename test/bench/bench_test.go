package main

import (
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// TestBenchSmoke runs the smallest benchmark (3 nodes, 5 claims, one rep of
// backlog and delete) so that the harness cannot rot: every figure it
// reports must be there and every check must pass. It asserts no timing.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	opts := Options{Sizes: []int{3}, Scenarios: []string{"backlog", "delete"}, Claims: 5, Reps: 1,
		BinDir: os.Getenv("CSI_TOPOLOGY_TEST_BIN_DIR")}
	report, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Runs) != 2 {
		t.Fatalf("%d runs, want backlog and delete", len(report.Runs))
	}
	for _, r := range report.Runs {
		if len(r.Failures) > 0 {
			t.Errorf("%s: checks failed: %v", r.Scenario, r.Failures)
		}
		if r.ToAll <= 0 || r.CPUPerVolume <= 0 && r.PeakRSS <= 0 {
			t.Errorf("%s: figures missing: %+v", r.Scenario, r)
		}
	}
	backlog, del := report.Runs[0], report.Runs[1]
	if got := backlog.Requests["create persistentvolumes"]; got != 5 {
		t.Errorf("backlog: the audit log has %d PV creates by the provisioner, want 5 (requests: %v)", got, backlog.Requests)
	}
	// Informers list with a list or, streaming, with a watch.
	if backlog.Requests["list nodes"]+backlog.Requests["watch nodes"] == 0 || backlog.Startup <= 0 {
		t.Errorf("backlog: start-up (list nodes, informers synced) not measured: startup %v, requests %v", backlog.Startup, backlog.Requests)
	}
	if backlog.PeakRSS <= 0 {
		t.Errorf("backlog: no peak RSS")
	}
	if got := del.Requests["delete persistentvolumes"]; got < 5 {
		t.Errorf("delete: the audit log has %d PV deletes by the provisioner, want at least 5 (requests: %v)", got, del.Requests)
	}
	table := report.Markdown()
	for _, want := range []string{"A′ backlog", "Delete:", "| 3 | ours |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if out := t.TempDir(); report.Write(out) != nil {
		t.Errorf("writing the report: %v", report.Write(out))
	}
}
