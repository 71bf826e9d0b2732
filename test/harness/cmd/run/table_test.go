package main

import (
	"strings"
	"testing"
)

// TestPrintTable: plain make run prints the table as it always did; on
// real nodes (rows with what each pod read) it gains a READ BACK column.
func TestPrintTable(t *testing.T) {
	fake := row{pvc: "data-web-0", pod: "web-0", node: "node-z1-a", zone: "z1", pv: "pvc-1", affinity: "zone In z1", seconds: 0.9}
	real := fake
	real.node, real.readBack = "csi-topology-worker", "written by web-0 uid-1"
	tests := []struct {
		name string
		rows []row
		want []string
	}{
		{name: "fake nodes", rows: []row{fake}, want: []string{
			"PVC         NODE       ZONE  PV     NODE AFFINITY  SECONDS TO BOUND",
			"data-web-0  node-z1-a  z1    pvc-1  zone In z1     0.9",
		}},
		{name: "real nodes", rows: []row{real}, want: []string{
			"PVC         NODE                 ZONE  PV     NODE AFFINITY  SECONDS TO BOUND  READ BACK",
			"data-web-0  csi-topology-worker  z1    pvc-1  zone In z1     0.9               written by web-0 uid-1",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printTable(&b, tc.rows)
			if got := strings.Split(strings.TrimSpace(b.String()), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("table:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
