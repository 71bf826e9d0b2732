package main

import (
	"time"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/rest"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// nodeProbeInterval spaces the probes of a missing optional API in a node
// deployment, where every node's instance probes: 5 000 nodes probing each
// minute would send the API server 80 requests a second.
const nodeProbeInterval = 5 * time.Minute

// sourcesConfig says which data-source APIs csi-provisioner follows:
// VolumeSnapshots when the driver has CREATE_DELETE_SNAPSHOT,
// VolumeAttributesClasses when their feature gate is on. Whether the
// cluster serves them, and whether RBAC lets this process read them, is
// found out while running (optional APIs, picked up when they appear), not
// here.
func sourcesConfig(cfg config, info driverconn.DriverInfo, restCfg *rest.Config, nodeDeployment bool) (provisioner.SourcesConfig, error) {
	sc := provisioner.SourcesConfig{ProtectionWorkers: int(cfg.cloningProtectionThreads),
		AttributesClasses: cfg.featureGates.enabled("VolumeAttributesClass")}
	if nodeDeployment {
		sc.ProbeInterval = nodeProbeInterval
	}
	if info.SupportsSnapshot {
		c := rest.CopyConfig(restCfg)
		c.QPS, c.Burst, c.UserAgent = float32(cfg.kubeAPIQPS), cfg.kubeAPIBurst, "csi-provisioner-snapshots/"+version
		var err error
		if sc.Snapshots, err = snapclientset.NewForConfig(c); err != nil {
			return sc, err
		}
	}
	return sc, nil
}
