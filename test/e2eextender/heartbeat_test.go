package e2eextender

import (
	"testing"
	"time"
)

// A live-driver signal, through the extender of a stock
// kube-scheduler: kill -9 of one node's driver keeps new pods with
// WaitForFirstConsumer claims off that node once its heartbeat Lease
// expires (TTL 4 s), with the reason on the pod; once the driver is back a
// new pod is placed there. (The pod rejected meanwhile is retried on the
// stock scheduler's next cluster event or periodic flush: extenders cannot
// requeue.)
func TestDriverSilenceFiltered(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "x-")
	env.EnsureRoom(t, ctx, ns, "z2", 10<<30)
	h := env.AddHeartbeatNode(t, ctx, "node-silent", "z2", 4*time.Second)
	out := env.DriverSilence(t, ctx, ns, ns, h, false)
	t.Logf("pinned pod's condition while the driver was silent: %s", out.Reason)
}
