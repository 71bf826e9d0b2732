// Command bench measures csi-provisioner as a whole process on the
// project's local control plane (test/harness/controlplane, test/harness/lab): fake Ready
// nodes with CSINodes, the mock driver's controller, the provisioner under
// its ServiceAccount of deploy/. It runs the scenarios of
// docs/performance.md ("make bench"), optionally alternating with another
// provisioner binary (--compare), and writes one JSON file per run and a
// markdown table.
//
//	go run ./test/harness/cmd/bench --bin-dir=bin --sizes=3,1000 --scenarios=backlog,delete --reps=2
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// Scenarios, in the order a rep runs them.
var allScenarios = []string{"backlog", "delete", "burst", "wffc", "nodes", "node"}

// Options configure a benchmark.
type Options struct {
	// Sizes are the cluster sizes (fake nodes), one control plane each.
	Sizes []int
	// Scenarios to run (allScenarios); delete needs backlog's claims and
	// runs backlog with it.
	Scenarios []string
	// Claims is N, the claims (pods for wffc) of a run.
	Claims int
	// BackgroundClaims are the node scenario's claims of other nodes, each
	// bound to a PV, created once per size before its first run.
	BackgroundClaims int
	// Instances is the nodes scenario's number of csi-provisioner
	// --node-deployment processes (at most one per node).
	Instances int
	// NodeArgs are extra flags of our instances in the nodes scenario
	// (e.g. --node-deployment-selection=label).
	NodeArgs []string
	// NodesCentral also runs the nodes scenario's reference: one central
	// csi-provisioner provisioning the same claims.
	NodesCentral bool
	// Reps is the number of runs of each scenario per contender.
	Reps int
	// BinDir holds the project's binaries (make build); empty: built into
	// the cluster's temp dir.
	BinDir string
	// Compare is another csi-provisioner binary run through the same
	// scenarios, alternating with ours.
	Compare string
	// BindThroughContender adds the contender ours+bind: our
	// csi-provisioner with --bind-through, run alternately with the others
	// in the backlog, burst and wffc scenarios, with a table of who binds
	// the claims (start -> all PVs, all Bound, all scheduled; the PV
	// controller's writes).
	BindThroughContender bool
	// ControllerManagerQPS is kube-controller-manager's --kube-api-qps
	// (its --kube-api-burst twice that); 0 runs it at its defaults (20 and
	// 30), as in a stock cluster. --bind-through-contender makes 0 the
	// default, 2000 otherwise: see controllerManagerArgs.
	ControllerManagerQPS int
	// ProvisionerArgs are extra flags for every provisioner run.
	ProvisionerArgs []string
	// Out is the directory of the JSON files and the table.
	Out string
	// RepoRoot is the project's root (default: found from the working dir).
	RepoRoot string
	// ProfileDir, when set, receives Go profiles of our provisioner in the
	// backlog and node runs: CPU from launch (20 s) and the heap at the end.
	ProfileDir string
}

func (o Options) has(scenario string) bool {
	for _, s := range o.Scenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

func parseFlags(args []string) (Options, error) {
	var o Options
	var sizes, scenarios, extra, nodeExtra string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&sizes, "sizes", "3", "Cluster sizes (fake Ready nodes with CSINodes), comma-separated; 10 zones above 3 nodes.")
	fs.StringVar(&scenarios, "scenarios", "backlog,delete,burst", "Scenarios, comma-separated, of "+strings.Join(allScenarios, ",")+
		" (backlog: A′, burst: A, wffc: B; delete runs on backlog's claims; nodes: --instances csi-provisioner --node-deployment"+
		" at once and a central reference; node: one csi-provisioner --node-deployment, run after every rep of the others since its background claims stay).")
	fs.IntVar(&o.Claims, "claims", 500, "Claims per run (N).")
	fs.IntVar(&o.BackgroundClaims, "background-claims", 20000, "node: claims of other nodes, each bound to a PV of its node, in the cluster before the instance starts.")
	fs.IntVar(&o.Instances, "instances", 100, "nodes: csi-provisioner --node-deployment processes at once, on nodes spread over the cluster (at most one per node).")
	fs.StringVar(&nodeExtra, "node-args", "", "node, nodes: extra flags of our instances, space-separated (e.g. --node-deployment-selection=label; csi-node-router then runs from --bin-dir).")
	fs.BoolVar(&o.NodesCentral, "nodes-central", true, "nodes: also run the reference, one central csi-provisioner provisioning the same claims.")
	fs.IntVar(&o.Reps, "reps", 2, "Runs of each scenario per provisioner.")
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "Directory of the project's binaries (make build); empty: build them.")
	fs.StringVar(&o.Compare, "compare", "", "Another csi-provisioner binary to run through the same scenarios, alternating with ours.")
	fs.BoolVar(&o.BindThroughContender, "bind-through-contender", false, "Also run our csi-provisioner with --bind-through (\""+oursBind+"\") in the backlog, burst and wffc scenarios, "+
		"alternately with the others, and report who binds the claims: start → all PVs created, all Bound, all pods scheduled, the PV controller's writes per volume.")
	fs.IntVar(&o.ControllerManagerQPS, "controller-manager-qps", -1, "kube-controller-manager's --kube-api-qps, its --kube-api-burst twice that; 0: its defaults "+
		"(20 and 30, as in a stock cluster, where its PV controller marks, binds and releases every claim at that pace). "+
		"Default 0 with --bind-through-contender (who binds the claims is what it measures), else "+strconv.Itoa(fastControllerManagerQPS)+" (so that the PV controller does not set the pace of the other figures).")
	fs.StringVar(&extra, "provisioner-args", "", "Extra flags for every provisioner run, space-separated.")
	fs.StringVar(&o.ProfileDir, "profile-dir", "", "Save Go profiles of our provisioner's backlog and node runs here (CPU for 20 s from launch, heap once all claims are Bound; --enable-pprof).")
	fs.StringVar(&o.Out, "out", "", "Directory for the JSON of each run and table.md (default .cache/bench/<time>).")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--sizes: bad size %q", s)
		}
		o.Sizes = append(o.Sizes, n)
	}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if !contains(allScenarios, s) {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (known: %s)", s, strings.Join(allScenarios, ","))
		}
		o.Scenarios = append(o.Scenarios, s)
	}
	if o.ControllerManagerQPS < 0 {
		o.ControllerManagerQPS = fastControllerManagerQPS
		if o.BindThroughContender {
			o.ControllerManagerQPS = 0
		}
	}
	if o.Claims < 1 || o.Reps < 1 || o.Instances < 1 {
		return o, errors.New("--claims, --reps and --instances must be positive")
	}
	if o.BackgroundClaims < 0 {
		return o, errors.New("--background-claims must not be negative")
	}
	if o.Compare != "" {
		abs, err := filepath.Abs(o.Compare)
		if err != nil {
			return o, err
		}
		if _, err := os.Stat(abs); err != nil {
			return o, fmt.Errorf("--compare: %w", err)
		}
		o.Compare = abs
	}
	if o.BinDir != "" {
		abs, err := filepath.Abs(o.BinDir)
		if err != nil {
			return o, err
		}
		o.BinDir = abs
	}
	o.ProvisionerArgs = strings.Fields(extra)
	o.NodeArgs = strings.Fields(nodeExtra)
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// without returns list without s.
func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if opts.Out == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts.Out = filepath.Join(root, ".cache", "bench", time.Now().Format("20060102-150405"))
	}
	report, err := Run(ctx, opts)
	if report != nil {
		table := report.Markdown()
		fmt.Print(table)
		if werr := report.Write(opts.Out); werr != nil {
			fmt.Fprintln(os.Stderr, werr)
		} else {
			fmt.Fprintf(os.Stderr, "runs and table in %s\n", opts.Out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if report.Failed() {
		fmt.Fprintln(os.Stderr, "bench: checks failed (see the table)")
		os.Exit(1)
	}
}

// Run runs the benchmark: for each size a control plane, then Reps rounds
// of the scenarios, alternating ours, ours with --bind-through
// (--bind-through-contender) and the --compare binary within each round. It returns the results so far also on error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	report := &Report{Machine: thisMachine(), Command: strings.Join(os.Args, " "), Options: opts, Started: time.Now()}
	contenders := []string{ours}
	if opts.BindThroughContender {
		contenders = append(contenders, oursBind)
	}
	if opts.Compare != "" {
		contenders = append(contenders, theirs)
	}
	for _, size := range opts.Sizes {
		e, err := setUp(ctx, opts, size)
		if err != nil {
			return report, fmt.Errorf("%d nodes: %w", size, err)
		}
		err = e.runRounds(ctx, contenders, report)
		e.tearDown()
		if err != nil {
			return report, fmt.Errorf("%d nodes: %w", size, err)
		}
	}
	return report, nil
}

// runRounds runs the reps of every scenario at one size.
func (e *env) runRounds(ctx context.Context, contenders []string, report *Report) error {
	logger := klog.FromContext(ctx)
	if e.opts.Compare != "" {
		if err := e.grantUpstreamRBAC(ctx); err != nil {
			return err
		}
	}
	record := func(results ...Result) {
		for _, r := range results {
			logger.Info("Run done", "scenario", r.Scenario, "scheduler", r.Scheduler, "contender", r.Contender, "nodes", r.Nodes,
				"rep", r.Rep, "perSecond", round(r.PerSecond), "cpuSteadyMsPerVolume", round(r.CPUSteadyPerVolume),
				"peakRssMB", round(r.PeakRSS), "failures", r.Failures)
			if r.Scheduler != "" {
				logger.Info("Scheduler work", "scheduler", r.Scheduler, "nodes", r.Nodes, "rep", r.Rep, "cpuMsPerPod", round(r.SchedulerCPUPerPod),
					"allocKBPerPod", round(r.SchedulerAllocKBPerPod), "gcPer100Pods", round(r.SchedulerGCPer100Pods), "filteredPerPod", round(r.SchedulerFilteredPerPod))
			}
		}
		report.Runs = append(report.Runs, results...)
	}
	for rep := 1; rep <= e.opts.Reps; rep++ {
		for _, c := range contenders {
			// A rep at 5 000 nodes takes minutes: say where the bench is.
			logger.Info("Rep started", "nodes", e.size, "rep", rep, "of", e.opts.Reps, "contender", c, "scenarios", e.opts.Scenarios)
			var results []Result
			if e.opts.has("backlog") || e.opts.has("delete") {
				rs, err := e.runBacklog(ctx, c, rep, e.opts.has("delete"))
				if err != nil {
					return fmt.Errorf("backlog, %s, rep %d: %w", c, rep, err)
				}
				if !e.opts.has("backlog") {
					rs = rs[1:]
				}
				results = append(results, rs...)
			}
			if e.opts.has("burst") {
				r, err := e.runBurst(ctx, c, rep)
				if err != nil {
					return fmt.Errorf("burst, %s, rep %d: %w", c, rep, err)
				}
				results = append(results, r)
			}
			if e.opts.has("wffc") {
				rs, err := e.runWFFC(ctx, c, rep)
				if err != nil {
					return fmt.Errorf("wffc, %s, rep %d: %w", c, rep, err)
				}
				results = append(results, rs...)
			}
			record(results...)
		}
	}
	// The node deployments run without bind-through.
	contenders = without(contenders, oursBind)
	if e.opts.has("nodes") {
		if err := e.runNodesRounds(ctx, contenders, record); err != nil {
			return err
		}
	}
	// node runs after every rep of the others: its background claims stay
	// in the cluster, and the others would run with them. The contenders
	// take turns on one background.
	if e.opts.has("node") {
		for rep := 1; rep <= e.opts.Reps; rep++ {
			for _, c := range contenders {
				r, err := e.runNode(ctx, c, rep)
				if err != nil {
					return fmt.Errorf("node, %s, rep %d: %w", c, rep, err)
				}
				record(r)
			}
		}
	}
	return nil
}
