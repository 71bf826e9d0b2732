package provisioner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

func TestMetrics(t *testing.T) {
	for _, tc := range []struct {
		state controller.ProvisioningState
		err   error
		want  string
	}{
		{controller.ProvisioningFinished, nil, resultSuccess},
		{controller.ProvisioningReschedule, errors.New("x"), resultReschedule},
		{controller.ProvisioningInBackground, errors.New("x"), resultBackground},
		{controller.ProvisioningNoChange, errors.New("x"), resultRetry},
		{controller.ProvisioningFinished, errors.New("x"), resultError},
	} {
		if got := provisionResult(tc.state, tc.err); got != tc.want {
			t.Errorf("provisionResult(%s, %v) = %s, want %s", tc.state, tc.err, got, tc.want)
		}
	}
	reg := metrics.NewKubeRegistry()
	m := NewMetrics(reg)
	m.observeOperation("provision", "fast", resultSuccess, time.Second)
	m.observeOperation("provision", "fast", resultSuccess, time.Second)
	m.observeReschedule(RescheduleNoCapacity)
	m.Capacity().SetObjects(6)
	m.Capacity().ObserveWrite("update", nil)
	var nilMetrics *Metrics // records nothing, never panics
	nilMetrics.observeOperation("delete", "x", resultError, 0)
	nilMetrics.observeReschedule(RescheduleNoCapacity)
	nilMetrics.Capacity().SetObjects(1)
	nilMetrics.Capacity().ObserveWrite("create", nil)
	nilMetrics.observeSelectedToPV("x", 0)
	want := `
# HELP csi_topology_provisioner_capacity_objects [ALPHA] CSIStorageCapacity objects this provisioner publishes.
# TYPE csi_topology_provisioner_capacity_objects gauge
csi_topology_provisioner_capacity_objects 6
# HELP csi_topology_provisioner_operations_total [ALPHA] Provision and delete operations by storage class and result (success, reschedule, in_background, retry, error).
# TYPE csi_topology_provisioner_operations_total counter
csi_topology_provisioner_operations_total{operation="provision",result="success",storage_class="fast"} 2
# HELP csi_topology_provisioner_reschedules_total [ALPHA] Claims handed back to the scheduler (selected-node removed), by reason.
# TYPE csi_topology_provisioner_reschedules_total counter
csi_topology_provisioner_reschedules_total{reason="NoCapacity"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "csi_topology_provisioner_operations_total",
		"csi_topology_provisioner_reschedules_total", "csi_topology_provisioner_capacity_objects"); err != nil {
		t.Error(err)
	}
}
