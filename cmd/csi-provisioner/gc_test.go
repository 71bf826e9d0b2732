package main

import (
	"runtime/debug"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// A node's instance lowers the GC target unless the operator chose one with
// GOGC; a central provisioner keeps Go's default.
func TestTuneNodeGC(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, tc := range []struct {
		name           string
		nodeDeployment bool
		env            map[string]string
		want           int
	}{
		{"node instance", true, nil, nodeGCPercent},
		{"node instance with GOGC", true, map[string]string{"GOGC": "200"}, 100},
		{"node instance with GOMEMLIMIT", true, map[string]string{"GOMEMLIMIT": "100MiB"}, nodeGCPercent},
		{"central provisioner", false, nil, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			tuneNodeGC(logger, tc.nodeDeployment, func(k string) string { return tc.env[k] })
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC target %d, want %d", got, tc.want)
			}
		})
	}
}
