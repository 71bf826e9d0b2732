// Command csi-topology-scheduler is kube-scheduler, built from the pinned
// k8s.io/kubernetes, with the CSITopology plugin (pkg/scheduler/plugin)
// registered. Enable it in a KubeSchedulerConfiguration profile; see
// deploy/kubernetes/components/scheduler-plugin/config.yaml.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler/plugin"
)

// version is the project's version, stamped by the Makefile's LDFLAGS
// (make build and make image: -X main.version=...), like every other binary's. The
// Kubernetes version the scheduler embeds is stamped into
// k8s.io/component-base/version the same way.
var version = "devel"

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	withVersion(cmd, version)
	os.Exit(cli.Run(cmd))
}
