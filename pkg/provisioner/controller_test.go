package provisioner

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// TestControllerProvisionsClaim runs the whole controller (library, shared
// informers, index, event sink) over a fake clientset and the mock driver.
func TestControllerProvisionsClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mock, csiClient := startMock(t, ctx, nil)
	claim := makePVC("data", "zonal").withSelectedNode("n2")
	claim.Annotations["volume.kubernetes.io/storage-provisioner"] = testDriver
	full := makePVC("full", "zonal").withSelectedNode("n3")
	full.Annotations["volume.kubernetes.io/storage-provisioner"] = testDriver
	objs := []runtime.Object{makeClass("zonal").StorageClass, claim.PersistentVolumeClaim, full.PersistentVolumeClaim}
	for name, zone := range threeZones {
		objs = append(objs, makeNode(name, zone), makeCSINode(name, zoneKey))
	}
	if err := mock.SetCapacity(map[string]string{"zone": "z3"}, 0); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objs...)
	ctrl, err := NewController(ctx, ControllerConfig{
		Provisioner:        Config{DriverName: testDriver, SupportsTopology: true, StrictTopology: true},
		RetryIntervalStart: 10 * time.Millisecond,
		RetryIntervalMax:   100 * time.Millisecond,
	}, Clients{Work: client}, csiClient)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()

	var pv *v1.PersistentVolume
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, "pvc-uid-data", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("PV not created: %v", err)
	}
	if got := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]; got != "z2" {
		t.Errorf("PV in zone %s, want z2", got)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "data" || len(pv.Finalizers) == 0 {
		t.Errorf("PV claimRef %v finalizers %v", pv.Spec.ClaimRef, pv.Finalizers)
	}

	// The claim whose zone is full goes back to the scheduler.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims("apps").Get(ctx, "full", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, selected := c.Annotations[annSelectedNode]
		return !selected, nil
	})
	if err != nil {
		t.Fatalf("selected-node annotation not removed from the claim of the full zone: %v", err)
	}

	// One Event per provisioned volume, carrying the decision.
	var events []v1.Event
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events("apps").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		events = list.Items
		for _, ev := range events {
			if ev.Reason == reasonProvisioningSucceeded {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no ProvisioningSucceeded event: %v", err)
	}
	for _, ev := range events {
		switch {
		case ev.Reason == reasonProvisioning:
			t.Errorf("the library's Provisioning event was posted: %q", ev.Message)
		case ev.Reason == reasonProvisioningSucceeded && !strings.Contains(ev.Message, "selected node n2, segment "+zoneKey+"=z2"):
			t.Errorf("success event lacks the decision: %q", ev.Message)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// capacityConfig hands capacity publishing the driver, the node's
// managed-by value and the parameter parser of Provision: GetCapacity gets
// the parameters CreateVolume gets (no reserved keys), and a class whose
// parameters Provision refuses is refused by capacity publishing too.
func TestCapacityConfigFromProvisioner(t *testing.T) {
	cfg := ControllerConfig{Capacity: &capacity.Config{Namespace: "ns"}}
	cfg.Provisioner.DriverName = testDriver
	cfg.Provisioner.Node = &nodedeploy.Config{NodeName: "node-1"}
	cc := capacityConfig(cfg)
	if cc.DriverName != testDriver || cc.ManagedBy != capacity.ManagedBy("node-1") || cc.Namespace != "ns" {
		t.Errorf("capacityConfig = driver %q, managed-by %q, namespace %q; want %q, %q, ns", cc.DriverName, cc.ManagedBy, cc.Namespace,
			testDriver, capacity.ManagedBy("node-1"))
	}
	if cc.DriverParameters == nil {
		t.Fatal("capacityConfig sets no DriverParameters")
	}
	got, err := cc.DriverParameters(map[string]string{"type": "fast", "csi.storage.k8s.io/fstype": "xfs",
		"csi.storage.k8s.io/provisioner-secret-name": "s", "csi.storage.k8s.io/provisioner-secret-namespace": "ns"})
	if err != nil || len(got) != 1 || got["type"] != "fast" {
		t.Errorf("DriverParameters(valid class) = %v, %v; want only type=fast", got, err)
	}
	if _, err := cc.DriverParameters(map[string]string{"csi.storage.k8s.io/unknown-key": "x"}); err == nil {
		t.Error("DriverParameters(class with an unknown reserved key) = no error; want Provision's refusal")
	}
}
