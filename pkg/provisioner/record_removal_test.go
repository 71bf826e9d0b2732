package provisioner

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// TestRemoveInFlightRecordsWithoutDriver: without the driver, the one-shot
// removal takes the finalizer off claims with a PV and live claims without
// one, keeps it on a claim being deleted without a PV (its volume cannot be
// deleted), and leaves other drivers' claims alone.
func TestRemoveInFlightRecordsWithoutDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	other := makeClass("other").StorageClass
	other.Provisioner = "other.example.com"
	objs := []runtime.Object{
		makeClass("zonal").StorageClass, other,
		makePVC("bound", "zonal").withRecord().PersistentVolumeClaim,
		makePVC("inflight", "zonal").withRecord().PersistentVolumeClaim,
		makePVC("deleting", "zonal").deleting().withRecord().PersistentVolumeClaim,
		makePVC("foreign", "other").withRecord().PersistentVolumeClaim,
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-bound"},
			Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: "bound", UID: "uid-bound"}}},
	}
	client := fake.NewSimpleClientset(objs...)
	cfg := ControllerConfig{Provisioner: Config{DriverName: testDriver, SupportsTopology: true}}
	got, err := RemoveInFlightRecords(ctx, cfg, Clients{Work: client, Events: client}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{string(inflight.OutcomePVExists): 1, inflight.RemovalLeftToUpstream: 1, inflight.RemovalKept: 1}
	if got.Claims != 3 || len(got.Outcomes) != len(want) {
		t.Errorf("claims %d, outcomes %v; want 3, %v", got.Claims, got.Outcomes, want)
	}
	for o, n := range want {
		if got.Outcomes[o] != n {
			t.Errorf("outcome %s: %d, want %d (all: %v)", o, got.Outcomes[o], n, got.Outcomes)
		}
	}
	if !slices.Equal(got.Kept, []string{"apps/deleting"}) {
		t.Errorf("kept %v, want [apps/deleting]", got.Kept)
	}
	for name, keeps := range map[string]bool{"bound": false, "inflight": false, "deleting": true, "foreign": true} {
		c, err := client.CoreV1().PersistentVolumeClaims("apps").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if HasInFlightFinalizer(c) != keeps {
			t.Errorf("claim %s keeps the finalizer: %t, want %t", name, HasInFlightFinalizer(c), keeps)
		}
	}
}
