package main

import (
	"strings"
	"testing"
)

// TestCPUTotals checks /proc/stat's reading: busy time within all time,
// and both growing while this process spins.
func TestCPUTotals(t *testing.T) {
	busy1, total1, err := cpuTotals()
	if err != nil {
		t.Fatal(err)
	}
	if busy1 <= 0 || busy1 > total1 {
		t.Fatalf("busy %v ms of %v ms", busy1, total1)
	}
	for x := 0; ; x++ {
		busy2, total2, err := cpuTotals()
		if err != nil {
			t.Fatal(err)
		}
		if busy2 > busy1 && total2 > total1 {
			break
		}
		if x > 1e9 {
			t.Fatalf("busy time stayed at %v ms while spinning", busy1)
		}
	}
}

// TestWindowAndMachineTable checks a window's arithmetic and the table's
// row, and that runs without samples give no table.
func TestWindowAndMachineTable(t *testing.T) {
	a := &machineSample{busy: 1000, total: 4000, apiserver: 100, etcd: 10, kcm: 5, sched: 1}
	b := &machineSample{busy: 2900, total: 6000, apiserver: 1100, etcd: 210, kcm: 105, sched: 51}
	w := window(a, b, 100)
	if w == nil || w.Busy != 0.95 || w.APIServerPerVolume != 10 || w.EtcdPerVolume != 2 || w.KCMPerVolume != 1 || w.SchedulerPerVolume != 0.5 {
		t.Fatalf("window %+v", w)
	}
	if window(a, nil, 100) != nil || window(a, b, 0) != nil {
		t.Error("a window without both samples or volumes")
	}
	r := Result{Scenario: "backlog", Contender: oursBind, Nodes: 3, Volumes: 100, ToAllPVs: 2, ToAll: 2.5,
		MachineToAllPVs: w, MachineToAllBound: w, CPUSteadyPerVolume: 1.5}
	table := machineTable([]*group{{scenario: "backlog", contender: oursBind, nodes: 3, runs: []Result{r}}})
	if want := "| 3 | ours+bind | 2.00 | 2.50 | 95.0 | 10.0 | 2.00 | 1.00 | 0.5 | 1.50 | 95.0 | 10.0 |"; !strings.Contains(table, want) {
		t.Errorf("table lacks %q:\n%s", want, table)
	}
	r.MachineToAllPVs = nil
	if table := machineTable([]*group{{scenario: "backlog", contender: ours, nodes: 3, runs: []Result{r}}}); table != "" {
		t.Errorf("a table without samples:\n%s", table)
	}
}
