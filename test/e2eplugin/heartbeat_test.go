package e2eplugin

import (
	"testing"
	"time"
)

// A live-driver signal: kill -9 of one node's driver keeps new
// pods with WaitForFirstConsumer claims off that node once its heartbeat
// Lease expires (TTL 4 s), with the reason on the pod; once the driver is
// back, the pod the plugin rejected is activated and placed there, and so
// is a new one.
func TestDriverSilenceFiltered(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "p-")
	class := ns
	env.EnsureRoom(t, ctx, class, "z3", 10*gi)
	h := env.AddHeartbeatNode(t, ctx, "node-silent", "z3", 4*time.Second)
	out := env.DriverSilence(t, ctx, ns, class, h, true)
	t.Logf("pinned pod's condition while the driver was silent: %s", out.Reason)
}
