package lab

import (
	"context"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// RunTestMain is controlplane.RunTestMain for a suite that runs on one lab:
// it starts the control plane with opts, sets up a Lab with cfg on it and
// hands the Lab to ready, which keeps it and may set up more before any test
// runs (an error from Setup or ready fails the run). It returns the exit
// code for os.Exit.
func RunTestMain(m *testing.M, opts controlplane.Options, cfg Config, ready func(context.Context, *Lab) error) int {
	return controlplane.RunTestMain(m, opts, func(ctx context.Context, c *controlplane.Cluster) error {
		l, err := Setup(ctx, c, cfg)
		if err != nil {
			return err
		}
		return ready(ctx, l)
	})
}
