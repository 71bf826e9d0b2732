package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// machineSample is the machine's CPU at one moment: the time all CPUs spent
// busy and in all, from /proc/stat, and the CPU time of the control plane's
// busiest processes, from /proc/<pid>/stat; all in ms.
type machineSample struct {
	busy, total                 float64
	apiserver, etcd, kcm, sched float64
}

// machineProbe reads machine samples of one cluster.
type machineProbe struct {
	apiserver, etcd, kcm, sched proc
}

// machineProbe finds the cluster's kube-apiserver, etcd,
// kube-controller-manager and kube-scheduler.
func (e *env) machineProbe() (*machineProbe, error) {
	var p machineProbe
	for _, c := range []struct {
		p    *proc
		comm string
	}{{&p.apiserver, "kube-apiserver"}, {&p.etcd, "etcd"}, {&p.kcm, "kube-controller"}, {&p.sched, "kube-scheduler"}} {
		found, err := e.coreProcess(c.comm)
		if err != nil {
			return nil, err
		}
		*c.p = found
	}
	return &p, nil
}

// sample reads the machine now; a process that cannot be read counts 0.
func (p *machineProbe) sample() machineSample {
	var s machineSample
	s.busy, s.total, _ = cpuTotals()
	s.apiserver, _ = cpuMillis(p.apiserver.pid)
	s.etcd, _ = cpuMillis(p.etcd.pid)
	s.kcm, _ = cpuMillis(p.kcm.pid)
	s.sched, _ = cpuMillis(p.sched.pid)
	return s
}

// cpuTotals returns the time all CPUs spent busy and in all since boot, in
// ms, from /proc/stat's first line (idle and iowait are not busy).
func cpuTotals() (busy, total float64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var idle float64
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", f, err)
		}
		total += float64(v)
		if i == 3 || i == 4 { // idle, iowait
			idle += float64(v)
		}
	}
	// guest and guest_nice (fields 9 and 10) are counted in user and nice
	// already.
	if len(fields) > 9 {
		for _, f := range fields[9:min(len(fields), 11)] {
			v, _ := strconv.ParseUint(f, 10, 64)
			total -= float64(v)
		}
	}
	const msPerTick = 1000 / clockTicks
	return (total - idle) * msPerTick, total * msPerTick, nil
}

// MachineWindow is what the machine did between two moments of a run: the
// share of all its CPUs' time that was busy, and the control plane's CPU
// per volume of the run.
type MachineWindow struct {
	// Busy is busy CPU time over all CPU time, 0 to 1.
	Busy float64 `json:"busy"`
	// CPU ms per volume of the run, by process.
	APIServerPerVolume float64 `json:"apiserverMsPerVolume"`
	EtcdPerVolume      float64 `json:"etcdMsPerVolume"`
	KCMPerVolume       float64 `json:"kubeControllerManagerMsPerVolume"`
	SchedulerPerVolume float64 `json:"kubeSchedulerMsPerVolume"`
}

// window is the MachineWindow from a to b over volumes volumes; nil when
// either sample was not taken.
func window(a, b *machineSample, volumes int) *MachineWindow {
	if a == nil || b == nil || volumes <= 0 || b.total <= a.total {
		return nil
	}
	n := float64(volumes)
	return &MachineWindow{Busy: (b.busy - a.busy) / (b.total - a.total),
		APIServerPerVolume: (b.apiserver - a.apiserver) / n, EtcdPerVolume: (b.etcd - a.etcd) / n,
		KCMPerVolume: (b.kcm - a.kcm) / n, SchedulerPerVolume: (b.sched - a.sched) / n}
}

// machineFigures are the numeric columns of the machine table.
var machineFigures = []func(Result) float64{
	func(r Result) float64 { return r.ToAllPVs },
	func(r Result) float64 { return r.ToAll },
	func(r Result) float64 { return 100 * r.MachineToAllPVs.Busy },
	func(r Result) float64 { return r.MachineToAllPVs.APIServerPerVolume },
	func(r Result) float64 { return r.MachineToAllPVs.EtcdPerVolume },
	func(r Result) float64 { return r.MachineToAllPVs.KCMPerVolume },
	func(r Result) float64 { return r.MachineToAllPVs.SchedulerPerVolume },
	func(r Result) float64 { return r.CPUSteadyPerVolume },
	func(r Result) float64 { return 100 * r.MachineToAllBound.Busy },
	func(r Result) float64 { return r.MachineToAllBound.APIServerPerVolume },
}

// machineTable shows how busy the machine was while the backlog's PVs were
// created and its claims bound, and where the control plane's CPU went; ""
// without backlog runs that sampled it.
func machineTable(groups []*group) string {
	var b strings.Builder
	for _, g := range groups {
		if g.scenario != "backlog" || !slices.ContainsFunc(g.runs, sampled) {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n### The machine in the backlog: launch → all PVs created, and → all Bound (medians)\n\n")
			b.WriteString("Busy: all CPUs' busy time over their time (/proc/stat), 100 % when every core worked throughout. " +
				"CPU ms/vol: each process's CPU time (/proc/<pid>/stat) over the window, per volume; csi-provisioner's from its first to " +
				"its last PV. A provisioner whose run saturates the machine is paced by the API server's CPU, not by its own.\n\n")
			b.WriteString("| nodes | provisioner | start → all PVs s | start → all Bound s | busy to all PVs % | kube-apiserver ms/vol " +
				"| etcd ms/vol | kube-controller-manager ms/vol | kube-scheduler ms/vol | csi-provisioner ms/vol | busy to all Bound % " +
				"| kube-apiserver ms/vol to all Bound |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		cells := []string{fmt.Sprint(g.nodes), g.contender}
		sampledRuns := &group{runs: slices.DeleteFunc(slices.Clone(g.runs), func(r Result) bool { return !sampled(r) })}
		for _, f := range machineFigures {
			cells = append(cells, num(sampledRuns.median(f)))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// sampled reports whether r has both machine windows.
func sampled(r Result) bool { return r.MachineToAllPVs != nil && r.MachineToAllBound != nil }
