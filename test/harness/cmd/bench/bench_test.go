package main

import (
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// TestBenchSmoke runs the smallest benchmark (3 nodes, 5 claims, one rep of
// backlog, delete, burst, wffc with both schedulers, and node with 20
// background claims) so that the harness cannot rot: every figure it reports must be
// there and every check must pass. It asserts no timing.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	opts := Options{Sizes: []int{3}, Scenarios: []string{"backlog", "delete", "burst", "wffc", "node"}, Claims: 5, BackgroundClaims: 20, Reps: 1,
		ControllerManagerQPS: fastControllerManagerQPS, BinDir: os.Getenv("CSI_TOPOLOGY_TEST_BIN_DIR")}
	report, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Runs) != 6 {
		t.Fatalf("%d runs, want backlog, delete, burst, wffc with each scheduler, and node", len(report.Runs))
	}
	for _, r := range report.Runs {
		if len(r.Failures) > 0 {
			t.Errorf("%s: checks failed: %v", r.Scenario, r.Failures)
		}
		if r.ToAll <= 0 || r.CPUPerVolume <= 0 && r.PeakRSS <= 0 {
			t.Errorf("%s: figures missing: %+v", r.Scenario, r)
		}
	}
	backlog, del, burst, node := report.Runs[0], report.Runs[1], report.Runs[2], report.Runs[5]
	for _, r := range report.Runs[3:5] {
		// Rep 1 runs the stock scheduler first.
		if r.Scenario != "wffc" {
			t.Fatalf("runs 4 and 5 are %s, want wffc", r.Scenario)
		}
		// Each scheduler filtered the 3 nodes for each pod at least once, and
		// allocated something doing it.
		if r.SchedulerCPUPerPod <= 0 || r.SchedulerAllocKBPerPod <= 0 || r.SchedulerFilteredPerPod < 3 {
			t.Errorf("wffc, %s scheduler: CPU %v ms, %v KB allocated, %v nodes filtered per pod", r.Scheduler,
				r.SchedulerCPUPerPod, r.SchedulerAllocKBPerPod, r.SchedulerFilteredPerPod)
		}
	}
	if report.Runs[3].Scheduler != "stock" || report.Runs[4].Scheduler != "plugin" {
		t.Errorf("wffc rep 1 ran %s then %s, want stock then plugin", report.Runs[3].Scheduler, report.Runs[4].Scheduler)
	}
	// The burst runs a provisioner at its default flags: its own PV creates
	// only, and a start-up of its own.
	if burst.Scenario != "burst" || burst.Requests["create persistentvolumes"] != 5 || burst.Startup <= 0 {
		t.Errorf("burst: scenario %q, %d PV creates by the provisioner (want 5), start-up %v s (requests: %v)",
			burst.Scenario, burst.Requests["create persistentvolumes"], burst.Startup, burst.Requests)
	}
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
	for name, w := range map[string]*MachineWindow{"all PVs": backlog.MachineToAllPVs, "all Bound": backlog.MachineToAllBound} {
		if w == nil || w.Busy <= 0 || w.Busy > 1 || w.APIServerPerVolume <= 0 {
			t.Errorf("backlog: the machine from the launch to %s: %+v, want a busy share in (0, 1] and the API server's CPU", name, w)
		}
	}
	if table := report.Markdown(); !strings.Contains(table, "### The machine in the backlog") {
		t.Errorf("table lacks the machine's:\n%s", table)
	}
	if got := del.Requests["delete persistentvolumes"]; got < 5 {
		t.Errorf("delete: the audit log has %d PV deletes by the provisioner, want at least 5 (requests: %v)", got, del.Requests)
	}
	if node.Scenario != "node" || node.BackgroundClaims != 20 || node.BackgroundSetup <= 0 {
		t.Errorf("node: scenario %q, background %d claims set up in %v s", node.Scenario, node.BackgroundClaims, node.BackgroundSetup)
	}
	// The instance's user is in the audit log too.
	if got := node.Requests["create persistentvolumes"]; got != 5 {
		t.Errorf("node: the audit log has %d PV creates by the instance, want 5 (requests: %v)", got, node.Requests)
	}
	if node.Startup <= 0 || node.RSSSynced <= 0 || node.PeakRSS < node.RSSSynced || node.PeakRSSDeleted < node.PeakRSS {
		t.Errorf("node: start-up %v s, RSS at sync %v MB, peak RSS %v MB, with the deletes %v MB", node.Startup, node.RSSSynced,
			node.PeakRSS, node.PeakRSSDeleted)
	}
	// Watching everything (the default selection), the instance receives
	// every change of the other nodes' 20 claims and 20 PVs.
	if node.OtherNodeChanges != 40 || node.OtherNodeEvents < 40 {
		t.Errorf("node: %d changes of other nodes' claims and PVs, %v watch events received for them; want 40 and at least 40",
			node.OtherNodeChanges, node.OtherNodeEvents)
	}
	table := report.Markdown()
	for _, want := range []string{"A′ backlog", "Delete:", "Node deployment", "with 20 claims of other nodes", "| 3 | ours |",
		"watch events from other nodes",
		"Scheduler work per pod", "| 3 | plugin / stock |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if out := t.TempDir(); report.Write(out) != nil {
		t.Errorf("writing the report: %v", report.Write(out))
	}
}

// TestBenchNodesSmoke runs the nodes scenario at a smoke size (5
// instances on 20 nodes, 50 claims, one rep, and the central reference) so
// that it cannot rot: both rows must pass their checks and report the API
// server's CPU, the instances' memory and the watch events.
func TestBenchNodesSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	opts := Options{Sizes: []int{20}, Scenarios: []string{"nodes"}, Claims: 50, Instances: 5, NodesCentral: true, Reps: 1,
		ControllerManagerQPS: fastControllerManagerQPS, BinDir: os.Getenv("CSI_TOPOLOGY_TEST_BIN_DIR")}
	report, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Runs) != 2 {
		t.Fatalf("%d runs, want the instances and the central reference", len(report.Runs))
	}
	want := []struct {
		deployment string
		instances  int
	}{{"node ×5", 5}, {"central ×1", 5}}
	for i, r := range report.Runs {
		if len(r.Failures) > 0 {
			t.Errorf("%s: checks failed: %v", r.Deployment, r.Failures)
		}
		if r.Scenario != "nodes" || r.Deployment != want[i].deployment || r.Instances != want[i].instances {
			t.Errorf("run %d: scenario %q, deployment %q, %d instances; want nodes, %q, %d", i, r.Scenario, r.Deployment,
				r.Instances, want[i].deployment, want[i].instances)
		}
		if r.ToAll <= 0 || r.APIServerCPUPerVolume <= 0 || r.PeakRSS <= 0 || r.CPUPerVolume <= 0 || r.WatchEventsPerVolume <= 0 ||
			r.WatchDispatchedPerVolume <= 0 {
			t.Errorf("%s: figures missing: %+v", r.Deployment, r)
		}
		if got := r.Requests["create persistentvolumes"]; got != 50 {
			t.Errorf("%s: the audit log has %d PV creates by the provisioners, want 50", r.Deployment, got)
		}
	}
	// Five instances each receive every claim and PV event, the central
	// provisioner alone receives them once: more watch events are sent.
	if nodes, central := report.Runs[0], report.Runs[1]; nodes.WatchEventsPerVolume <= central.WatchEventsPerVolume ||
		nodes.InstancePeakRSSMax >= nodes.PeakRSS {
		t.Errorf("watch events per volume: %v with 5 instances, %v central; peak RSS: largest instance %v MB of %v MB in all",
			nodes.WatchEventsPerVolume, central.WatchEventsPerVolume, nodes.InstancePeakRSSMax, nodes.PeakRSS)
	}
	table := report.Markdown()
	for _, want := range []string{"Many node-deployment instances", "| 20 | 5 | ours | node ×5 |", "| 20 | 5 | ours | central ×1 |", "1.00×"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestBenchBindThroughSmoke runs the burst scenario at a smoke size with
// the ours+bind contender (--bind-through-contender) so that its figures
// cannot rot: start -> all PVs, the PV controller's mark of each claim, and
// each claim's status written once, by the PV controller for ours and by
// one of the two for ours+bind, with kube-controller-manager at its default
// API rate limit (Options.ControllerManagerQPS 0). It asserts no timing.
func TestBenchBindThroughSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	const n = 5
	opts := Options{Sizes: []int{3}, Scenarios: []string{"burst"}, Claims: n, Reps: 1, BindThroughContender: true,
		BinDir: os.Getenv("CSI_TOPOLOGY_TEST_BIN_DIR")}
	report, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Runs) != 2 || report.Runs[0].Contender != ours || report.Runs[1].Contender != oursBind {
		t.Fatalf("runs %+v, want burst of ours, then of ours+bind", report.Runs)
	}
	for _, r := range report.Runs {
		if len(r.Failures) > 0 {
			t.Errorf("%s: checks failed: %v", r.Contender, r.Failures)
		}
		if r.ToAllPVs <= 0 || r.ToAllPVs > r.ToAll {
			t.Errorf("%s: start → all PVs %v s, start → all Bound %v s", r.Contender, r.ToAllPVs, r.ToAll)
		}
		if r.PVControllerMarkPerVolume != 1 {
			t.Errorf("%s: %v marks per volume by the PV controller, want 1 (its writes: %v)", r.Contender, r.PVControllerMarkPerVolume,
				r.PVControllerWrites)
		}
		statuses := r.Requests["update persistentvolumeclaims/status"] + r.PVControllerWrites["update persistentvolumeclaims/status"]
		if statuses != n {
			t.Errorf("%s: %d claim status writes by the provisioner and the PV controller, want %d (provisioner: %v; PV controller: %v)",
				r.Contender, statuses, n, r.Requests, r.PVControllerWrites)
		}
	}
	if ours := report.Runs[0]; ours.PVControllerBindPerVolume < 3 || ours.Requests["update persistentvolumeclaims/status"] != 0 {
		t.Errorf("ours: the PV controller made %v binding writes per volume (want at least 3), the provisioner %d claim status writes (want 0)",
			ours.PVControllerBindPerVolume, ours.Requests["update persistentvolumeclaims/status"])
	}
	table := report.Markdown()
	for _, want := range []string{"| 3 | ours+bind |", "| 3 | ours / ours+bind |", "### Who binds the claims",
		"kube-controller-manager: its default API rate limit"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestBenchCompareWFFCSmoke runs the wffc scenario at a smoke size with
// upstream external-provisioner v6.3.0 as --compare, so that upstream's
// WaitForFirstConsumer rows (capacity tracking in upstream's terms: $NAMESPACE,
// --capacity-ownerref-level=-1) cannot rot: every pod scheduled with each
// scheduler, every check passed, for ours and for theirs. It asserts no
// timing.
func TestBenchCompareWFFCSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	_, ctx := ktesting.NewTestContext(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	up, err := controlplane.BuildUpstream(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Sizes: []int{3}, Scenarios: []string{"wffc"}, Claims: 5, Reps: 1, Compare: up.Provisioner,
		ControllerManagerQPS: fastControllerManagerQPS, BinDir: os.Getenv("CSI_TOPOLOGY_TEST_BIN_DIR")}
	report, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range report.Runs {
		seen[r.Contender+" "+r.Scheduler] = true
		if len(r.Failures) > 0 {
			t.Errorf("%s, %s scheduler: checks failed: %v", r.Contender, r.Scheduler, r.Failures)
		}
		if r.ToAllScheduled <= 0 || r.ToAll <= 0 {
			t.Errorf("%s, %s scheduler: start → all scheduled %v s, all Bound %v s", r.Contender, r.Scheduler, r.ToAllScheduled, r.ToAll)
		}
	}
	for _, want := range []string{"ours stock", "ours plugin", "theirs stock", "theirs plugin"} {
		if !seen[want] {
			t.Errorf("no wffc run of %s scheduler; runs: %v", want, seen)
		}
	}
	if table := report.Markdown(); !strings.Contains(table, "| theirs |") {
		t.Errorf("table lacks upstream's rows:\n%s", table)
	}
}
