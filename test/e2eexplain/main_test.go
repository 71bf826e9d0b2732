// Package e2eexplain sets up, on a local control plane with the lab, each
// cause a user meets when a claim stays Pending, and checks that
// kubectl-csi_topology explain names it in its conclusion line; and that it
// explains a bound claim by what decided its place, and never writes.
package e2eexplain

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	gi      = int64(1) << 30
	timeout = 90 * time.Second
	// leaseNamespace holds the provisioner's leader Lease.
	leaseNamespace = "csi-topology"
)

// leaderArgs run the provisioner with a short leader Lease, so that a killed
// provisioner's Lease expires within seconds; capacityArgs have it publish
// CSIStorageCapacity objects.
var (
	leaderArgs = []string{"--leader-election", "--leader-election-namespace=" + leaseNamespace,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}
	capacityArgs = []string{"--enable-capacity", "--capacity-namespace=" + lab.CapacityNamespace, "--capacity-poll-interval=2s"}
)

// auditPolicy logs every request of the reader ServiceAccount
// (TestExplainOnlyReads) and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:` + readerNamespace + `:reader"]
- level: None
`

var (
	env    *lab.Lab
	client kubernetes.Interface
	// tool is the kubectl-csi_topology binary.
	tool string
)

func TestMain(m *testing.M) {
	cfg := lab.Config{Zones: []string{"z1", "z2"}, NodesPerZone: 1, CapacityBytes: 100 * gi,
		ProvisionerArgs: append(append([]string{}, leaderArgs...), capacityArgs...)}
	os.Exit(lab.RunTestMain(m, controlplane.Options{AuditPolicy: auditPolicy}, cfg, func(ctx context.Context, l *lab.Lab) error {
		env, client = l, l.Cluster.Client
		c := l.Cluster
		dir := filepath.Join(c.Dir, "explain-bin")
		if err := controlplane.BuildProject(ctx, c.RepoRoot, dir, "./cmd/kubectl-csi_topology"); err != nil {
			return err
		}
		tool = filepath.Join(dir, "kubectl-csi_topology")
		return nil
	}))
}
