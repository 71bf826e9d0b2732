package main

import (
	"fmt"
	"strings"
)

// nodesTitle heads the nodes scenario's table.
const nodesTitle = "Many node-deployment instances: --instances csi-provisioner --node-deployment at once (the DaemonSet's flags, " +
	"each beside its node-local mock driver), then N claims of the node-local class selected for their nodes (round robin) " +
	"created at once; reference: one central csi-provisioner provisioning the same claims"

// nodesFigures are the nodes table's numeric columns, in order.
var nodesFigures = []func(Result) float64{
	func(r Result) float64 { return r.Startup },
	func(r Result) float64 { return r.APIServerCPUStartup / 1000 },
	func(r Result) float64 { return r.ToAll },
	func(r Result) float64 { return r.PerSecond },
	func(r Result) float64 { return r.APIServerCPUPerVolume },
	func(r Result) float64 { return r.EtcdCPUPerVolume },
	func(r Result) float64 { return r.CPUPerVolume },
	func(r Result) float64 { return r.WatchEventsPerVolume },
	func(r Result) float64 { return r.WatchDispatchedPerVolume },
	func(r Result) float64 { return r.PeakRSS },
	func(r Result) float64 { return r.RSSAnon },
	func(r Result) float64 { return r.InstancePeakRSSMax },
	func(r Result) float64 { return r.RouterPeakRSS },
	func(r Result) float64 { return r.RequestsPerVolume },
}

// nodesTable renders the nodes runs ("" without any), each row with its
// API server CPU per volume relative to the central reference's.
func nodesTable(groups []*group) string {
	var b strings.Builder
	apiCPU := func(r Result) float64 { return r.APIServerCPUPerVolume }
	for _, g := range groups {
		if g.scenario != "nodes" {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n### %s\n\n", nodesTitle)
			b.WriteString("CPU from /proc/<pid>/stat, from the first claim's creation to all Bound, per volume; watch events of claims and PVs from " +
				"the API server's /metrics (sent: to all watchers; dispatched: by the watch cache, each once); RSS summed over the provisioners " +
				"(VmHWM at all Bound; anonymous at the same moment).\n\n")
			b.WriteString("| nodes | instances | provisioner | deployment | start-up s | API server CPU start-up s | start → all Bound s | per s | " +
				"API server CPU ms/vol | × central | etcd CPU ms/vol | provisioners CPU ms/vol | watch events sent/vol | dispatched/vol | " +
				"Σ peak RSS MB | Σ anon RSS MB | max peak RSS MB | router peak RSS MB | requests/vol | load | checks |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		cells := []string{fmt.Sprint(g.nodes), fmt.Sprint(g.runs[0].Instances), g.contender, g.deployment}
		for i, f := range nodesFigures {
			cells = append(cells, num(g.median(f)))
			if i == 4 {
				vs := ""
				for _, c := range groups {
					if c.scenario == "nodes" && c.nodes == g.nodes && isCentral(&c.runs[0]) {
						vs = ratio(g.median(apiCPU), c.median(apiCPU))
					}
				}
				cells = append(cells, vs)
			}
		}
		var loads, failures []string
		for _, r := range g.runs {
			loads = append(loads, fmt.Sprintf("%.1f", r.LoadAverage[0]))
			failures = append(failures, r.Failures...)
		}
		check := "ok"
		if len(failures) > 0 {
			check = "FAILED: " + strings.Join(failures, "; ")
		}
		b.WriteString("| " + strings.Join(append(cells, strings.Join(loads, ", "), check), " | ") + " |\n")
	}
	return b.String()
}

// nodeMemoryTable is the node scenario's memory and what the instance
// received of other nodes' changes (nodechurn.go), per size.
func nodeMemoryTable(groups []*group) string {
	var b strings.Builder
	for _, g := range groups {
		if g.scenario != "node" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n### Node deployment: memory, and watch events from other nodes (medians)\n\n")
			b.WriteString("RSS from /proc/<pid>/status (anonymous: heap and stacks; file: the binary's pages); peak RSS is VmHWM once the " +
				"run's claims were all Bound, and again once they were deleted and their volumes gone; " +
				"changes are annotation patches on claims and PVs of other nodes once the run's claims were Bound; events " +
				"are those the instance's claim and PV informers received for them (csi_topology_provisioner_cache_events_total).\n\n")
			b.WriteString("| nodes | provisioner | background claims | RSS at sync MB | peak RSS MB | anon / file MB at all Bound | " +
				"peak RSS with the deletes MB | other nodes' changes | watch events received for them |\n|---|---|---|---|---|---|---|---|---|\n")
		}
		// Upstream has no metric of its informers' events.
		changes, events := "–", "–"
		if g.contender == ours {
			changes = num(g.median(func(r Result) float64 { return float64(r.OtherNodeChanges) }))
			events = num(g.median(func(r Result) float64 { return r.OtherNodeEvents }))
		}
		name := g.contender
		if g.deployment != "" {
			name += " (" + g.deployment + ")"
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %s / %s | %s | %s | %s |\n", g.nodes, name,
			g.runs[0].BackgroundClaims, num(g.median(func(r Result) float64 { return r.RSSSynced })),
			num(g.median(func(r Result) float64 { return r.PeakRSS })), num(g.median(func(r Result) float64 { return r.RSSAnon })),
			num(g.median(func(r Result) float64 { return r.RSSFile })), num(g.median(func(r Result) float64 { return r.PeakRSSDeleted })),
			changes, events)
	}
	return b.String()
}
