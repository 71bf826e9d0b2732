package manifests

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// ourOnlyNodeFlags are the flags of the per-node csi-provisioner that
// upstream external-provisioner does not have. docs/migrating.md tells a
// user who swaps upstream's image back into the DaemonSet to drop exactly
// these; every other flag must be one upstream accepts.
var ourOnlyNodeFlags = []string{"--node-deployment-selection"}

// checkUpstreamTakesNodeArgs runs upstream's csi-provisioner (built from
// its module, controlplane.BuildUpstream) with the container's arguments
// less ourOnlyNodeFlags and --version, in the environment the DaemonSet
// gives it: upstream parses every flag before it prints its version, and
// exits on one it does not know. It also checks that the container sets
// POD_NAME, which upstream's default --capacity-ownerref-level reads.
func checkUpstreamTakesNodeArgs(t *testing.T, c corev1.Container) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	up, err := controlplane.BuildUpstream(ctx, cluster.RepoRoot)
	if err != nil {
		t.Fatalf("building upstream's csi-provisioner: %v", err)
	}
	var args []string
	for _, a := range c.Args {
		if name, _, _ := strings.Cut(a, "="); !slices.Contains(ourOnlyNodeFlags, name) {
			args = append(args, a)
		}
	}
	cmd := exec.CommandContext(ctx, up.Provisioner, append(args, "--version")...)
	cmd.Env = append(os.Environ(), "NODE_NAME=node-1", "NAMESPACE=csi-topology", "POD_NAME=csi-node-abcde")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("upstream's csi-provisioner %s refuses the DaemonSet's arguments %q (without %q): %v\n%s",
			controlplane.UpstreamProvisionerVersion, args, ourOnlyNodeFlags, err, out)
	}
	if got := envFrom(c, "POD_NAME"); got != "metadata.name" {
		t.Errorf("csi-provisioner: POD_NAME from %q, want the downward API's metadata.name (upstream's owner lookup reads it)", got)
	}
}
