package e2ebind

import (
	"context"
	"os"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// auditPolicy logs the writes of claims and PVs, to count who bound them.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["persistentvolumes", "persistentvolumes/status", "persistentvolumeclaims", "persistentvolumeclaims/status"]
- level: None
`

var env *lab.Lab

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTestMain(m, controlplane.Options{AuditPolicy: auditPolicy}, func(ctx context.Context, c *controlplane.Cluster) error {
		cfg := lab.ZonesAndRacks()
		cfg.ProvisionerArgs = append(cfg.ProvisionerArgs, "--bind-through")
		var err error
		env, err = lab.Setup(ctx, c, cfg)
		return err
	}))
}
