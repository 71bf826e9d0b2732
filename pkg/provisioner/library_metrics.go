package provisioner

import (
	"k8s.io/component-base/metrics"
	libmetrics "sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller/metrics"
)

// libraryMetricsSubsystem is the prefix the provisioning library and
// upstream's external-provisioner give the library's metrics.
const libraryMetricsSubsystem = "controller"

// newLibraryMetrics returns the provisioning library's own metrics
// (controller_persistentvolumeclaim_provision_total, _failed_total,
// _duration_seconds and controller_persistentvolume_delete_*), registered
// in reg, for controller.MetricsInstance: the library keeps them up to date
// (it counts every Provision and Delete it calls, as in upstream's
// external-provisioner) and reg serves them beside ours. Without an
// instance the library keeps them in collectors nobody serves.
func newLibraryMetrics(reg metrics.KubeRegistry) libmetrics.Metrics {
	m := libmetrics.New(libraryMetricsSubsystem)
	// RawMustRegister: the library's collectors are plain Prometheus ones.
	reg.RawMustRegister(
		m.PersistentVolumeClaimProvisionTotal,
		m.PersistentVolumeClaimProvisionFailedTotal,
		m.PersistentVolumeClaimProvisionDurationSeconds,
		m.PersistentVolumeDeleteTotal,
		m.PersistentVolumeDeleteFailedTotal,
		m.PersistentVolumeDeleteDurationSeconds,
	)
	return m
}
