package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Report is a benchmark's runs.
type Report struct {
	Machine Machine   `json:"machine"`
	Command string    `json:"command"`
	Options Options   `json:"options"`
	Started time.Time `json:"started"`
	Runs    []Result  `json:"runs"`
}

// Failed reports whether a check of any run failed.
func (r *Report) Failed() bool {
	for _, run := range r.Runs {
		if len(run.Failures) > 0 {
			return true
		}
	}
	return false
}

// Write writes each run as JSON and the table as table.md into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, run := range r.Runs {
		name := fmt.Sprintf("%s%s%s-%dnodes-%s-rep%d.json", run.Scenario, suffix(run.Scheduler), suffix(fileSafe(run.Deployment)),
			run.Nodes, run.Contender, run.Rep)
		data, err := json.MarshalIndent(struct {
			Machine Machine `json:"machine"`
			Command string  `json:"command"`
			Result
		}{r.Machine, r.Command, run}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "table.md"), []byte(r.Markdown()), 0o644)
}

// fileSafe keeps the letters, digits and dots of s and turns runs of
// anything else into one '-'.
func fileSafe(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range s {
		if c < 128 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.') {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "-" + s
}

// scenarioTitles explain each scenario in the table.
var scenarioTitles = map[string]string{
	"backlog": "A′ backlog: N Immediate claims exist, then the provisioner starts (--kube-api-qps=1000 --kube-api-burst=2000)",
	"delete":  "Delete: the backlog's claims deleted, reclaim policy Delete, same process (figures per deleted PV)",
	"burst":   "A burst: the provisioner runs at its defaults, then N claims are created at once",
	"wffc":    "B WaitForFirstConsumer: N pod + claim pairs, capacity tracking on; stock kube-scheduler vs csi-topology-scheduler (plugin); figures per pod, latency create → scheduled",
	"node": "Node deployment: one csi-provisioner --node-deployment (NODE_NAME one of the fake nodes, the DaemonSet's flags, a node-local mock driver) " +
		"with %d claims of other nodes bound in the cluster; then N claims selected for its node are created at once",
}

// controllerManagerSetting describes kube-controller-manager's API rate
// limit of a run.
func controllerManagerSetting(qps int) string {
	if qps == 0 {
		return "its default API rate limit (--kube-api-qps=20 --kube-api-burst=30), as in a stock cluster"
	}
	return strings.Join(controllerManagerArgs(qps), " ")
}

// title is a scenario's heading in the table.
func (r *Report) title(scenario string) string {
	if scenario == "node" {
		return fmt.Sprintf(scenarioTitles[scenario], r.Options.BackgroundClaims)
	}
	return scenarioTitles[scenario]
}

// group is the runs of one table row.
type group struct {
	scenario, scheduler, contender string
	// deployment is the nodes scenario's Result.Deployment ("" elsewhere).
	deployment string
	nodes      int
	runs       []Result
}

// Markdown renders the medians of each scenario, size and contender, with
// the ratio theirs / ours when --compare ran.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %d CPUs, %s, %s. Command: `%s`. %d claims per run, %d reps per provisioner (medians; load = 1-minute load average before each rep).\n",
		r.Machine.CPUs, r.Machine.Model, r.Machine.GoVersion, r.Command, r.Options.Claims, r.Options.Reps)
	if r.Options.Compare != "" {
		fmt.Fprintf(&b, "theirs: `%s`, run alternately with ours.\n", r.Options.Compare)
	}
	if r.Options.BindThroughContender {
		b.WriteString(oursBind + ": ours with --bind-through, run alternately with the others (backlog, burst, wffc).\n")
	}
	b.WriteString("kube-controller-manager: " + controllerManagerSetting(r.Options.ControllerManagerQPS) + ".\n")
	groups := r.groups()
	for _, scenario := range allScenarios {
		if scenario == "nodes" {
			b.WriteString(nodesTable(groups))
			continue
		}
		rows := []string{}
		for _, g := range groups {
			if g.scenario == scenario {
				rows = append(rows, g.row())
				rows = append(rows, ratioRows(groups, g)...)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n", r.title(scenario))
		b.WriteString("| nodes | provisioner | per s | start → first s | start → all s | p50 s | p99 s | start-up s | CPU start-up ms | CPU steady ms/vol | CPU ms/vol (all) | peak RSS MB | RSS at sync MB | requests/vol | Events during / after | sched CPU ms/pod | load | checks |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, row := range rows {
			b.WriteString(row)
		}
	}
	if r.Options.BindThroughContender {
		b.WriteString(bindingTable(groups))
	}
	b.WriteString(machineTable(groups))
	b.WriteString(schedulerTable(groups))
	b.WriteString(nodeMemoryTable(groups))
	b.WriteString("\n### API requests per volume by verb and resource (medians)\n\n| scenario | nodes | provisioner | requests |\n|---|---|---|---|\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", g.scenario+suffix(g.scheduler)+suffix(g.deployment), g.nodes, g.contender, g.requests())
	}
	return b.String()
}

func (r *Report) groups() []*group {
	var out []*group
	for _, run := range r.Runs {
		g := findDeployment(out, run.Scenario, run.Scheduler, run.Contender, run.Deployment, run.Nodes)
		if g == nil {
			g = &group{scenario: run.Scenario, scheduler: run.Scheduler, contender: run.Contender, deployment: run.Deployment, nodes: run.Nodes}
			out = append(out, g)
		}
		g.runs = append(g.runs, run)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.nodes != b.nodes {
			return a.nodes < b.nodes
		}
		if a.scheduler != b.scheduler {
			return a.scheduler > b.scheduler // stock before plugin
		}
		return a.contender < b.contender // ours before theirs
	})
	return out
}

func findGroup(groups []*group, scenario, scheduler, contender string, nodes int) *group {
	return findDeployment(groups, scenario, scheduler, contender, "", nodes)
}

func findDeployment(groups []*group, scenario, scheduler, contender, deployment string, nodes int) *group {
	for _, g := range groups {
		if g.scenario == scenario && g.scheduler == scheduler && g.contender == contender && g.deployment == deployment && g.nodes == nodes {
			return g
		}
	}
	return nil
}

// median of one figure over the group's runs.
func (g *group) median(f func(Result) float64) float64 {
	var v []float64
	for _, r := range g.runs {
		v = append(v, f(r))
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// figures are the table's numeric columns, in order.
var figures = []func(Result) float64{
	func(r Result) float64 { return r.PerSecond },
	func(r Result) float64 { return r.ToFirst },
	func(r Result) float64 { return r.ToAll },
	func(r Result) float64 { return r.P50 },
	func(r Result) float64 { return r.P99 },
	func(r Result) float64 { return r.Startup },
	func(r Result) float64 { return r.CPUStartup },
	func(r Result) float64 { return r.CPUSteadyPerVolume },
	func(r Result) float64 { return r.CPUPerVolume },
	func(r Result) float64 { return r.PeakRSS },
	func(r Result) float64 { return r.RSSSynced },
	func(r Result) float64 { return r.RequestsPerVolume },
}

func (g *group) row() string {
	cells := []string{fmt.Sprint(g.nodes), g.contender + suffix(g.scheduler)}
	for _, f := range figures {
		cells = append(cells, num(g.median(f)))
	}
	cells = append(cells,
		fmt.Sprintf("%s / %s", num(g.median(func(r Result) float64 { return float64(r.EventsDuring) })),
			num(g.median(func(r Result) float64 { return float64(r.EventsAfter) }))),
		num(g.median(func(r Result) float64 { return r.SchedulerCPUPerPod })))
	var loads, failures []string
	for _, r := range g.runs {
		loads = append(loads, fmt.Sprintf("%.1f", r.LoadAverage[0]))
		failures = append(failures, r.Failures...)
	}
	check := "ok"
	if len(failures) > 0 {
		check = "FAILED: " + strings.Join(failures, "; ")
	}
	cells = append(cells, strings.Join(loads, ", "), check)
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// ratioRows are the ratios that follow g's row: after theirs, theirs /
// ours and theirs / ours+bind; after ours+bind, ours / ours+bind (each
// when both ran).
func ratioRows(groups []*group, g *group) []string {
	var rows []string
	var pairs [][2]string
	switch g.contender {
	case theirs:
		pairs = [][2]string{{theirs, ours}, {theirs, oursBind}}
	case oursBind:
		pairs = [][2]string{{ours, oursBind}}
	}
	for _, p := range pairs {
		a := findGroup(groups, g.scenario, g.scheduler, p[0], g.nodes)
		b := findGroup(groups, g.scenario, g.scheduler, p[1], g.nodes)
		if a != nil && b != nil {
			rows = append(rows, ratioRow(p[0]+" / "+p[1], a, b))
		}
	}
	return rows
}

// ratioRow is a / b for each figure.
func ratioRow(label string, a, b *group) string {
	cells := []string{fmt.Sprint(b.nodes), label}
	for _, f := range figures {
		cells = append(cells, ratio(a.median(f), b.median(f)))
	}
	cells = append(cells, "", "", "", "")
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// requests renders the median count per volume of each request kind.
func (g *group) requests() string {
	keys := map[string]bool{}
	for _, r := range g.runs {
		for k := range r.Requests {
			keys[k] = true
		}
	}
	type kv struct {
		k string
		v float64
	}
	var list []kv
	for k := range keys {
		list = append(list, kv{k, g.median(func(r Result) float64 { return float64(r.Requests[k]) / float64(r.Volumes) })})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].v != list[j].v {
			return list[i].v > list[j].v
		}
		return list[i].k < list[j].k
	})
	var parts []string
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%s %s", e.k, num(e.v)))
	}
	return strings.Join(parts, ", ")
}

// num renders a figure with three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func round(v float64) string { return num(v) }

// schedulerTable compares the two schedulers of the wffc runs at each size:
// CPU per pod with every rep (it moves with the machine's load), and the
// work each scheduler's /metrics counts, which does not; "" without wffc
// runs.
func schedulerTable(groups []*group) string {
	var b strings.Builder
	cpu := func(r Result) float64 { return r.SchedulerCPUPerPod }
	work := []func(Result) float64{
		func(r Result) float64 { return r.SchedulerAllocKBPerPod },
		func(r Result) float64 { return r.SchedulerGCPer100Pods },
		func(r Result) float64 { return r.SchedulerFilteredPerPod },
	}
	row := func(g *group) []float64 {
		v := []float64{g.median(cpu)}
		for _, f := range work {
			v = append(v, g.median(f))
		}
		return v
	}
	for _, stock := range groups {
		if stock.scenario != "wffc" || stock.scheduler != "stock" || stock.contender != ours {
			continue
		}
		plugin := findGroup(groups, "wffc", "plugin", ours, stock.nodes)
		if plugin == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n### Scheduler work per pod (B): stock kube-scheduler vs csi-topology-scheduler\n\n")
			b.WriteString("CPU from /proc, medians with each rep in brackets; allocated KB, GC cycles per 100 pods and nodes filtered per pod from each scheduler's /metrics.\n\n")
			b.WriteString("| nodes | scheduler | CPU ms/pod | allocated KB/pod | GC cycles/100 pods | nodes filtered/pod |\n|---|---|---|---|---|---|\n")
		}
		s, p := row(stock), row(plugin)
		for _, g := range []struct {
			name string
			grp  *group
			v    []float64
		}{{"stock", stock, s}, {"plugin", plugin, p}} {
			var reps []string
			for _, r := range g.grp.runs {
				reps = append(reps, num(r.SchedulerCPUPerPod))
			}
			fmt.Fprintf(&b, "| %d | %s | %s [%s] | %s | %s | %s |\n", stock.nodes, g.name, num(g.v[0]), strings.Join(reps, ", "),
				num(g.v[1]), num(g.v[2]), num(g.v[3]))
		}
		cells := []string{}
		for i := range s {
			cells = append(cells, ratio(p[i], s[i]))
		}
		fmt.Fprintf(&b, "| %d | plugin / stock | %s |\n", stock.nodes, strings.Join(cells, " | "))
	}
	return b.String()
}

// ratio renders a / b, "" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", a/b)
}
