// Package e2eswap swaps upstream external-provisioner v6.3.0 for
// csi-provisioner and back on one local control plane, with claims in
// every state at each swap, and checks that nothing is stuck or leaked:
// the promise that a vendor can swap the image in and out. The
// CSIStorageCapacity objects of --enable-capacity are swapped the same way,
// both directions.
//
// CSI_TOPOLOGY_SWAP_CLAIMS sets the claims per group (default 8 for make
// test; make conformance runs 200).
package e2eswap

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// defaultClaims is the size of each group of claims for make test.
const defaultClaims = 8

// removeRecords runs csi-provisioner --remove-in-flight-records between
// stopping ours and starting upstream, as docs/operations.md says; false
// shows what a rollback without it leaves behind.
var removeRecords = flag.Bool("swap.remove-records", true, "run csi-provisioner --remove-in-flight-records when swapping back to upstream (the documented procedure)")

var (
	env      *lab.Lab
	client   kubernetes.Interface
	upstream string
	// groupSize is CSI_TOPOLOGY_SWAP_CLAIMS.
	groupSize = defaultClaims
)

// leaderArgs are the flags both provisioners run with: one Lease between
// them, as in a Deployment.
var leaderArgs = []string{"--leader-election", "--leader-election-namespace=csi-topology",
	"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}

func TestMain(m *testing.M) {
	flag.Parse()
	if s := os.Getenv("CSI_TOPOLOGY_SWAP_CLAIMS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 4 {
			fmt.Fprintf(os.Stderr, "CSI_TOPOLOGY_SWAP_CLAIMS=%q: want a number of at least 4\n", s)
			os.Exit(2)
		}
		groupSize = n
	}
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{}, func(ctx context.Context, c *controlplane.Cluster) error {
		up, err := controlplane.BuildUpstream(ctx, c.RepoRoot)
		if err != nil {
			return err
		}
		upstream = up.Provisioner
		env, err = lab.Setup(ctx, c, lab.Config{Zones: []string{"z1", "z2"}, NodesPerZone: 2, CapacityBytes: 10000 << 30,
			ProvisionerArgs: leaderArgs})
		client = c.Client
		return err
	}))
}

// waitTimeout bounds each wait of the test, growing with its size.
func waitTimeout() time.Duration { return 90*time.Second + time.Duration(groupSize)*time.Second }
