package main

import (
	"fmt"
	"sort"
	"strings"
)

// bindingScenarios are the scenarios the ours+bind contender runs.
var bindingScenarios = []string{"backlog", "burst", "wffc"}

// bindingTable shows who binds the claims (--bind-through-contender): for
// each run of bindingScenarios, start -> all PVs created (the provisioner
// alone), all claims Bound and all pods scheduled, the requests per volume
// and the PV controller's writes per volume, with ratios to ours+bind; ""
// without such runs.
func bindingTable(groups []*group) string {
	var b strings.Builder
	for _, scenario := range bindingScenarios {
		for _, g := range groups {
			if g.scenario != scenario {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("\n### Who binds the claims: start → all PVs created, all Bound, all pods scheduled (medians)\n\n")
				b.WriteString("Bound / PVs is start → all Bound over start → all PVs created. PV controller writes: kube-controller-manager's " +
					"(user agent " + pvBinderAgent + ") successful updates and patches per volume, from the audit log: binding ones " +
					"(PV and claim status, claim and PV once the claim's PV was created) and its mark of each claim for the provisioner " +
					"(before the PV); the backlog's marks precede the launch and are counted too.\n\n")
				b.WriteString("| scenario | nodes | provisioner | start → all PVs s | start → all Bound s | Bound / PVs | start → all scheduled s " +
					"| requests/vol | PV controller binding writes/vol | PV controller marks/vol | PV controller writes/vol by kind | load |\n")
				b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			}
			b.WriteString(g.bindingRow())
			// After ours+bind, ours / ours+bind; after theirs, theirs / ours+bind.
			other := g
			switch g.contender {
			case oursBind:
				other = findGroup(groups, g.scenario, g.scheduler, ours, g.nodes)
			case ours:
				other = nil
			}
			if bind := findGroup(groups, g.scenario, g.scheduler, oursBind, g.nodes); bind != nil && other != nil {
				b.WriteString(bindingRatioRow(other, bind))
			}
		}
	}
	return b.String()
}

// bindingFigures are the numeric columns of the binding table.
var bindingFigures = []func(Result) float64{
	func(r Result) float64 { return r.ToAllPVs },
	func(r Result) float64 { return r.ToAll },
	func(r Result) float64 {
		if r.ToAllPVs == 0 {
			return 0
		}
		return r.ToAll / r.ToAllPVs
	},
	func(r Result) float64 { return r.ToAllScheduled },
	func(r Result) float64 { return r.RequestsPerVolume },
	func(r Result) float64 { return r.PVControllerBindPerVolume },
	func(r Result) float64 { return r.PVControllerMarkPerVolume },
}

func (g *group) bindingRow() string {
	cells := []string{g.scenario + suffix(g.scheduler), fmt.Sprint(g.nodes), g.contender}
	for _, f := range bindingFigures {
		cells = append(cells, num(g.median(f)))
	}
	var loads []string
	for _, r := range g.runs {
		loads = append(loads, fmt.Sprintf("%.1f", r.LoadAverage[0]))
	}
	cells = append(cells, g.binderWrites(), strings.Join(loads, ", "))
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// bindingRatioRow is g / ours+bind for the times of the binding table.
func bindingRatioRow(g, bind *group) string {
	cells := []string{g.scenario + suffix(g.scheduler), fmt.Sprint(g.nodes), g.contender + " / " + oursBind}
	for i, f := range bindingFigures {
		if i == 2 || i >= 4 { // Bound / PVs and the per-volume counts: no ratio.
			cells = append(cells, "")
			continue
		}
		cells = append(cells, ratio(g.median(f), bind.median(f)))
	}
	cells = append(cells, "", "")
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// binderWrites renders the median count per volume of each kind of the PV
// controller's writes.
func (g *group) binderWrites() string {
	keys := map[string]bool{}
	for _, r := range g.runs {
		for k := range r.PVControllerWrites {
			keys[k] = true
		}
	}
	list := make([]string, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	sort.Strings(list)
	var parts []string
	for _, k := range list {
		v := g.median(func(r Result) float64 { return float64(r.PVControllerWrites[k]) / float64(r.Volumes) })
		parts = append(parts, fmt.Sprintf("%s %s", k, num(v)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
