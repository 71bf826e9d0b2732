package provisioner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// gatedCreate holds every CreateVolume until open is closed (or the call's
// context ends first, which wins when both are done), then fails it with
// code, or passes it to the driver when code is OK. entered gets one value
// per call that starts, returned one per call that ends.
type gatedCreate struct {
	ControllerClient
	code              codes.Code
	open              chan struct{}
	entered, returned chan struct{}
	closeOnce         sync.Once
}

func newGatedCreate(next ControllerClient, code codes.Code) *gatedCreate {
	return &gatedCreate{ControllerClient: next, code: code, open: make(chan struct{}),
		entered: make(chan struct{}, 100), returned: make(chan struct{}, 100)}
}

func (g *gatedCreate) release() { g.closeOnce.Do(func() { close(g.open) }) }

func (g *gatedCreate) CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	g.entered <- struct{}{}
	defer func() { g.returned <- struct{}{} }()
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if g.code != codes.OK {
		return nil, status.Error(g.code, "refused by the test")
	}
	return g.ControllerClient.CreateVolume(ctx, in, opts...)
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestStopFinishesInFlightCreate: a Controller asked to stop lets the
// CreateVolume calls in flight finish, so that their claims get a PV and
// lose the in-flight record, and removes the record of a claim whose last
// CreateVolume said that no volume exists; a call that outlasts the drain
// keeps its claim's record. A rollback that swaps only the image then
// leaves no claim with a finalizer upstream never removes.
func TestStopFinishesInFlightCreate(t *testing.T) {
	tests := []struct {
		name string
		code codes.Code
		// releaseAfterStop opens the gate right after the stop; false
		// opens it before the stop (the call has ended), nil never.
		releaseAfterStop *bool
		drain            time.Duration
		wantPV           bool
		wantRecord       bool
	}{
		{name: "call in flight finishes", code: codes.OK, releaseAfterStop: ptr.To(true), wantPV: true},
		{name: "final error before the stop", code: codes.InvalidArgument, releaseAfterStop: ptr.To(false)},
		{name: "resource exhausted in flight", code: codes.ResourceExhausted, releaseAfterStop: ptr.To(true)},
		{name: "call outlasts the drain", code: codes.OK, drain: 300 * time.Millisecond, wantRecord: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			_, mockClient := startMock(t, ctx, nil)
			gate := newGatedCreate(mockClient, tc.code)
			t.Cleanup(gate.release)
			claim := makePVC("data", "zonal")
			claim.Annotations = map[string]string{annStorageProvisioner: testDriver}
			objs := []runtime.Object{makeClass("zonal").Immediate().StorageClass, claim.PersistentVolumeClaim}
			for name, zone := range threeZones {
				objs = append(objs, makeNode(name, zone), makeCSINode(name, zoneKey))
			}
			client := fake.NewClientset(objs...)
			ctrl, err := NewController(ctx, ControllerConfig{Provisioner: Config{DriverName: testDriver, SupportsTopology: true},
				RetryIntervalStart: time.Hour, RetryIntervalMax: time.Hour, DrainTimeout: tc.drain}, Clients{Work: client}, gate)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			done := make(chan error, 1)
			go func() { done <- ctrl.Run(runCtx) }()

			waitChan(t, gate.entered, "CreateVolume")
			if got := getClaim(t, ctx, client, claim.PersistentVolumeClaim); !inflight.HasFinalizer(got) {
				t.Fatalf("claim without the in-flight record while its CreateVolume runs: %v", got.Finalizers)
			}
			if tc.releaseAfterStop != nil && !*tc.releaseAfterStop {
				gate.release()
				waitChan(t, gate.returned, "CreateVolume to return")
			}
			stop()
			if tc.releaseAfterStop != nil && *tc.releaseAfterStop {
				gate.release()
			}
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if gotPV := len(pvs.Items) == 1 && pvs.Items[0].Spec.ClaimRef.UID == claim.UID; gotPV != tc.wantPV {
				t.Errorf("after the stop: PV of the claim %t (%d PVs), want %t", gotPV, len(pvs.Items), tc.wantPV)
			}
			got := getClaim(t, ctx, client, claim.PersistentVolumeClaim)
			if inflight.HasFinalizer(got) != tc.wantRecord {
				t.Errorf("after the stop: in-flight record %t (finalizers %v), want %t", inflight.HasFinalizer(got), got.Finalizers, tc.wantRecord)
			}
		})
	}
}

// TestHandBackDropsRecordOfAbsentVolume: a delayed claim whose CreateVolume
// says that no volume exists goes back to the scheduler without its
// in-flight record, in the same write.
func TestHandBackDropsRecordOfAbsentVolume(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, mockClient := startMock(t, ctx, nil)
	gate := newGatedCreate(mockClient, codes.ResourceExhausted)
	gate.release()
	claim := makePVC("data", "zonal").withSelectedNode("n2")
	claim.Annotations[annStorageProvisioner] = testDriver
	objs := []runtime.Object{makeClass("zonal").StorageClass, claim.PersistentVolumeClaim}
	for name, zone := range threeZones {
		objs = append(objs, makeNode(name, zone), makeCSINode(name, zoneKey))
	}
	client := runController(t, ctx, ControllerConfig{RetryIntervalStart: time.Hour, RetryIntervalMax: time.Hour,
		Provisioner: Config{SupportsTopology: true}}, gate, objs...)
	var got *v1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got = getClaim(t, ctx, client, claim.PersistentVolumeClaim)
		_, selected := got.Annotations[annSelectedNode]
		return !selected, nil
	})
	if err != nil {
		t.Fatalf("claim not handed back: %v", err)
	}
	if inflight.HasFinalizer(got) {
		t.Errorf("claim handed back after RESOURCE_EXHAUSTED keeps the in-flight record: %v", got.Finalizers)
	}
}

func getClaim(t *testing.T, ctx context.Context, client *fake.Clientset, claim *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	t.Helper()
	got, err := client.CoreV1().PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
