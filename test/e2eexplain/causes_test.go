package e2eexplain

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// addNode adds a node for one test and deletes it at cleanup.
func addNode(t *testing.T, ctx context.Context, spec lab.NodeSpec) {
	t.Helper()
	if err := env.AddNode(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), spec.Name, metav1.DeleteOptions{})
		_ = client.StorageV1().CSINodes().Delete(context.WithoutCancel(ctx), spec.Name, metav1.DeleteOptions{})
	})
}

// causeCase sets up one cause in a namespace and returns the claim to
// explain, with the cause and the words its conclusion line must have.
type causeCase struct {
	name  string
	setup func(t *testing.T, ctx context.Context, ns string) string
	cause explain.Cause
	want  string
}

// runCauses runs each case in a namespace of its own and waits until the
// tool's conclusion line names its cause (and -o json gives the same).
func runCauses(t *testing.T, cases []causeCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, ns := lab.NewNamespace(t, env.Cluster, "x-")
			claim := tc.setup(t, ctx, ns)
			waitCause(t, ctx, ns, claim, tc.cause, tc.want)
		})
	}
}

// TestExplainNamesPlacementCauses sets up each cause that keeps a claim from
// a node (driver, topology, capacity, attach limit, data source, heartbeat)
// and checks the conclusion line names it.
func TestExplainNamesPlacementCauses(t *testing.T) {
	runCauses(t, []causeCase{
		{"no driver on the selected node", func(t *testing.T, ctx context.Context, ns string) string {
			addNode(t, ctx, lab.NodeSpec{Name: "bare-z3", Zone: "z3"})
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{}), gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", "bare-z3"))
			return "data"
		}, explain.CauseNoDriverOnNode, "no driver " + lab.DriverName + " on node bare-z3: install the node plugin there"},
		{"allowedTopologies matching no node", func(t *testing.T, ctx context.Context, ns string) string {
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Zones: []string{"z9"}}), gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", ""))
			return "data"
		}, explain.CauseNoAllowedSegment, "(" + lab.ZoneKey + " in (z9)) match no node with driver"},
		{"segment full", func(t *testing.T, ctx context.Context, ns string) string {
			if err := env.SetCapacity(ctx, "z2", 0); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.SetCapacity(context.WithoutCancel(ctx), "z2", 100*gi) })
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{}), gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", "node-z2-a"))
			return "data"
		}, explain.CauseSegmentFull, "free space there"},
		{"attach limit reached", func(t *testing.T, ctx context.Context, ns string) string {
			addNode(t, ctx, lab.NodeSpec{Name: "one-slot-z1", Zone: "z1", Driver: true, MaxVolumes: 1})
			class := lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{})
			lab.NewClaim(t, ctx, env.Cluster, ns, "first", class, gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "first", podOf("first", "one-slot-z1"))
			lab.WaitBound(t, ctx, env.Cluster, ns, "first")
			lab.NewClaim(t, ctx, env.Cluster, ns, "second", class, gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "second", podOf("second", "one-slot-z1"))
			return "second"
		}, explain.CauseAttachLimit, "attach limit reached on node one-slot-z1"},
		{"clone source in another zone", func(t *testing.T, ctx context.Context, ns string) string {
			class := lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{})
			lab.NewClaim(t, ctx, env.Cluster, ns, "source", class, gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "source", podOf("source", "node-z1-a"))
			lab.WaitBound(t, ctx, env.Cluster, ns, "source")
			lab.NewClaim(t, ctx, env.Cluster, ns, "copy", class, gi, cloneOf("source"))
			lab.NewPod(t, ctx, env.Cluster, ns, "copy", podOf("copy", "node-z2-a"))
			return "copy"
		}, explain.CauseSourceOutOfReach, "out of reach of node node-z2-a"},
		{"driver silent", func(t *testing.T, ctx context.Context, ns string) string {
			h := env.AddHeartbeatNode(t, ctx, "silent-z5", "z5", 3*time.Second)
			h.KillDriver()
			h.WaitLease(t, ctx, false)
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{}), gi)
			lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", "silent-z5"))
			return "data"
		}, explain.CauseDriverSilent, "on node silent-z5 is silent"},
	})
}

// TestExplainNamesClaimCauses sets up each cause that keeps a claim from any
// volume (class parameter, secret, the driver's refusal, no provisioner) and
// checks the conclusion line names it.
func TestExplainNamesClaimCauses(t *testing.T) {
	runCauses(t, []causeCase{
		{"bad class parameter", func(t *testing.T, ctx context.Context, ns string) string {
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true,
				Parameters: map[string]string{"csi.storage.k8s.io/fs-type": "ext4"}}), gi)
			return "data"
		}, explain.CauseBadClassParameter, "unknown key(s) csi.storage.k8s.io/fs-type"},
		{"missing secret", func(t *testing.T, ctx context.Context, ns string) string {
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true, Parameters: map[string]string{
				"csi.storage.k8s.io/provisioner-secret-name": "absent", "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"}}), gi)
			return "data"
		}, explain.CauseMissingSecret, "absent"},
		{"driver INVALID_ARGUMENT", func(t *testing.T, ctx context.Context, ns string) string {
			if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Code: "InvalidArgument"}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true}), gi)
			return "data"
		}, explain.CauseDriverInvalidArgument, "INVALID_ARGUMENT"},
		{"no provisioner running", func(t *testing.T, ctx context.Context, ns string) string {
			env.KillProvisioner()
			t.Cleanup(func() {
				if err := env.StartProvisioner(); err != nil {
					t.Error(err)
				}
			})
			lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{Immediate: true}), gi)
			return "data"
		}, explain.CauseNoProvisioner, "its leader Lease " + leaseNamespace + "/"},
	})
}

// TestExplainBoundClaim checks that a bound claim's conclusion says what
// decided its place: the provisioner's decision from its Event.
func TestExplainBoundClaim(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "x-")
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{}), gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "data", podOf("data", "node-z1-a"))
	lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	waitCause(t, ctx, ns, "data", explain.CauseBound, "placed by: selected node node-z1-a, segment "+lab.ZoneKey+"=z1")
}

// TestExplainAllGroupsByCause checks the summary over a namespace: the
// claims that are not bound, grouped by the cause their conclusion names.
func TestExplainAllGroupsByCause(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "x-")
	narrow := lab.NewClass(t, ctx, env.Cluster, ns+"-narrow", lab.ClassOptions{Zones: []string{"z9"}})
	for _, name := range []string{"narrow-a", "narrow-b"} {
		lab.NewClaim(t, ctx, env.Cluster, ns, name, narrow, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, name, podOf(name, ""))
	}
	lab.NewClaim(t, ctx, env.Cluster, ns, "typo", lab.NewClass(t, ctx, env.Cluster, ns+"-typo", lab.ClassOptions{Immediate: true,
		Parameters: map[string]string{"csi.storage.k8s.io/fs-type": "ext4"}}), gi)
	lab.NewClaim(t, ctx, env.Cluster, ns, "done", lab.NewClass(t, ctx, env.Cluster, ns, lab.ClassOptions{}), gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "done", podOf("done", "node-z1-a"))
	lab.WaitBound(t, ctx, env.Cluster, ns, "done")
	want := []string{
		"namespace " + ns + ": 3 of 4 claim(s) not bound",
		"  " + string(explain.CauseNoAllowedSegment) + " (2): narrow-a, narrow-b",
		"  " + string(explain.CauseBadClassParameter) + " (1): typo",
	}
	var out string
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		out, err = runTool(ctx, env.Cluster.Kubeconfig, "explain", "pvc", "--all", "-n", ns)
		for _, w := range want {
			if err != nil || !strings.Contains(out, w) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("explain pvc --all never gave %q: %v\n%s", want, err, out)
	}
	t.Logf("explain pvc --all:\n%s", out)
}
