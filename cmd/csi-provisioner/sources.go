package main

import (
	"context"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// sourcesConfig finds out which data-source APIs the cluster serves:
// snapshot support is off (one log line) without the VolumeSnapshot CRDs or
// without the driver's CREATE_DELETE_SNAPSHOT, VolumeAttributesClass
// support without storage.k8s.io/v1 VolumeAttributesClass.
func sourcesConfig(ctx context.Context, cfg config, info provisioner.DriverInfo, client kubernetes.Interface, restCfg *rest.Config) (provisioner.SourcesConfig, error) {
	logger := klog.FromContext(ctx)
	sc := provisioner.SourcesConfig{ProtectionWorkers: int(cfg.cloningProtectionThreads)}
	if info.SupportsSnapshot {
		served, err := provisioner.SnapshotAPIServed(client)
		if err != nil {
			return sc, err
		}
		if served {
			c := rest.CopyConfig(restCfg)
			c.QPS, c.Burst, c.UserAgent = float32(cfg.kubeAPIQPS), cfg.kubeAPIBurst, "csi-provisioner-snapshots/"+version
			if sc.Snapshots, err = snapclientset.NewForConfig(c); err != nil {
				return sc, err
			}
		} else {
			logger.Info("The API serves no snapshot.storage.k8s.io/v1 VolumeSnapshot (CRDs not installed): claims restoring a snapshot are refused")
		}
	}
	if cfg.featureGates.enabled("VolumeAttributesClass") {
		served, err := provisioner.AttributesClassAPIServed(client)
		if err != nil {
			return sc, err
		}
		sc.AttributesClasses = served
		if !served {
			logger.Info("The API serves no storage.k8s.io/v1 VolumeAttributesClass (Kubernetes before 1.34): claims naming one are refused")
		}
	}
	return sc, nil
}
