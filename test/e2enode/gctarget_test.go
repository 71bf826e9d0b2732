package e2enode

import (
	"context"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Every node's instance runs with the lower garbage-collector target of a
// node's instance (csi-provisioner's nodeGCPercent, 50), read from its Go
// runtime metric; when this test's environment sets GOGC, the instances
// inherit it and keep what it sets, as this process does.
func TestNodeInstanceGCTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	want := 50.0
	if os.Getenv("GOGC") != "" {
		mine := debug.SetGCPercent(100)
		debug.SetGCPercent(mine)
		want = float64(mine)
	}
	for _, node := range nl.Names {
		m, err := lab.Scrape(ctx, nl.Node(node).HTTPURL+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if len(m["go_gc_gogc_percent"]) != 1 {
			t.Fatalf("%s's instance exports %d samples of go_gc_gogc_percent, want 1 (%d metric families scraped, %d of them go_*; its log: %s)",
				node, len(m["go_gc_gogc_percent"]), len(m), goFamilies(m), nl.Node(node).Provisioner().LogPath())
		}
		if got := lab.MetricValue(m, "go_gc_gogc_percent", nil); got != want {
			t.Errorf("%s's instance: go_gc_gogc_percent %v, want %v", node, got, want)
		}
	}
}

// goFamilies counts the go_* metric families of m, to tell a scrape of
// another process (none) from one whose Go collector lacks the metric.
func goFamilies(m testutil.Metrics) int {
	n := 0
	for name := range m {
		if strings.HasPrefix(name, "go_") {
			n++
		}
	}
	return n
}
