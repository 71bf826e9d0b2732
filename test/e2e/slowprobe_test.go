package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// A driver whose Probe takes 3 s is connected at start-up with
// csi-provisioner's default flags, as upstream does (each start-up Probe
// bounded by --timeout, 10 s), and its claims are provisioned.
func TestSlowProbeAtStartup(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	// Cleanups run last first: the faults go, then the usual provisioner
	// comes back.
	t.Cleanup(func() { _ = env.StartProvisioner() })
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "Probe", Latency: faults.Duration(3 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	if err := env.StartProvisioner(); err != nil {
		t.Fatal(err)
	}
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-imm", lab.ClassOptions{Immediate: true})
	lab.NewClaim(t, ctx, env.Cluster, ns, "slow-probe", class, gi)
	lab.WaitBound(t, ctx, env.Cluster, ns, "slow-probe")
	lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "Connected to CSI driver")
}
