package main

import (
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	// These set client-go's work queue and leader-election metrics
	// providers (workqueue_*, leader_election_master_status) once, for
	// the whole process, in the legacy registry, as upstream's
	// external-provisioner does; queues made afterwards report there.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// newMetricsManager returns the metrics manager whose registry holds the
// CSI call metrics (csi_sidecar_operations_seconds), ours and the
// provisioning library's, and whose handler also serves the legacy
// registry: work queues, leader election, and the Go and process
// collectors (go_*, process_*). process_start_time_seconds comes from the
// process collector, so the manager must not add its own.
func newMetricsManager() metrics.CSIMetricsManager {
	mm := metrics.NewCSIMetricsManagerWithOptions("", metrics.WithProcessStartTime(false))
	return mm.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
}
