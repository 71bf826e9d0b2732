package provisioner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/fullsegments"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// churnStep is one attempt (or one PV deletion) in a full-segment scenario.
type churnStep struct {
	name    string
	advance time.Duration
	// z1 is zone z1's capacity in bytes set before the step; nil keeps it.
	z1 *int64
	// deleteIn, when set, deletes a PV in that zone instead of provisioning.
	deleteIn string
	class    string // default "c"
	// claim and size name the claim and its size; default data-<class>
	// and 1Gi.
	claim, size string
	// wantState and wantErr (a substring) describe the provision's outcome.
	wantState controller.ProvisioningState
	wantErr   string
	// wantCreates is the number of CreateVolume calls so far; wantReqs the
	// requirements of the last one when this step made it.
	wantCreates int
	wantReqs    *csi.TopologyRequirement
	// wantHeld and wantKnown: the mark of (class, z1) after the step.
	wantKnown, wantHeld bool
}

func bytesPtr(n int64) *int64 { return &n }

// TestProvisionFullSegment: a claim whose node is in a full zone costs one
// CreateVolume per hold, never a volume out of the node's reach after the
// first, and is provisioned in its zone once capacity is back.
func TestProvisionFullSegment(t *testing.T) {
	const hold = time.Minute
	nonStrict := &csi.TopologyRequirement{Requisite: zoneTopo("z1", "z2", "z3"), Preferred: zoneTopo("z1", "z2", "z3")}
	onlyZ1 := &csi.TopologyRequirement{Requisite: zoneTopo("z1"), Preferred: zoneTopo("z1")}
	placedElsewhere := churnStep{name: "placed elsewhere: deleted, marked", z1: bytesPtr(0),
		wantState: controller.ProvisioningReschedule, wantErr: string(RescheduleVolumeNotAccessible),
		wantCreates: 1, wantReqs: nonStrict, wantKnown: true, wantHeld: true}
	tests := []struct {
		name   string
		strict bool
		steps  []churnStep
	}{
		{name: "capacity back after the hold", steps: []churnStep{
			placedElsewhere,
			{name: "within the hold: no CreateVolume", advance: hold / 2,
				wantState: controller.ProvisioningReschedule, wantErr: "had no room for StorageClass",
				wantCreates: 1, wantKnown: true, wantHeld: true},
			{name: "after the hold: strict, still full, renewed", advance: hold / 2,
				wantState: controller.ProvisioningReschedule, wantErr: string(RescheduleNoCapacity),
				wantCreates: 2, wantReqs: onlyZ1, wantKnown: true, wantHeld: true},
			{name: "renewed hold: no CreateVolume", advance: hold - time.Second,
				wantState: controller.ProvisioningReschedule, wantErr: "had no room for StorageClass",
				wantCreates: 2, wantKnown: true, wantHeld: true},
			{name: "capacity back, hold over: strict success clears", advance: time.Second, z1: bytesPtr(10 * gi),
				wantState: controller.ProvisioningFinished, wantCreates: 3, wantReqs: onlyZ1},
		}},
		{name: "a deleted volume in the zone ends the hold", steps: []churnStep{
			placedElsewhere,
			{name: "PV in z1 deleted", deleteIn: "z1", z1: bytesPtr(10 * gi), wantCreates: 1, wantKnown: true},
			{name: "next attempt asks at once, strictly; success clears", wantState: controller.ProvisioningFinished, wantCreates: 2, wantReqs: onlyZ1},
		}},
		{name: "a deleted volume elsewhere keeps the mark", steps: []churnStep{
			placedElsewhere,
			{name: "PV in z2 deleted", deleteIn: "z2", wantCreates: 1, wantKnown: true, wantHeld: true},
			{name: "still held", wantState: controller.ProvisioningReschedule, wantErr: "had no room for StorageClass",
				wantCreates: 1, wantKnown: true, wantHeld: true},
		}},
		{name: "another class is asked", steps: []churnStep{
			placedElsewhere,
			{name: "class d: placed elsewhere too", class: "d", wantState: controller.ProvisioningReschedule,
				wantErr: string(RescheduleVolumeNotAccessible), wantCreates: 2, wantReqs: nonStrict, wantKnown: true, wantHeld: true},
		}},
		{name: "a smaller claim is asked for within the hold, a claim as large is held", strict: true, steps: []churnStep{
			{name: "50Gi: no room", claim: "big-1", size: "50Gi", z1: bytesPtr(5 * gi), wantState: controller.ProvisioningReschedule,
				wantErr: string(RescheduleNoCapacity), wantCreates: 1, wantReqs: onlyZ1, wantKnown: true, wantHeld: true},
			{name: "1Gi: asked for in z1 only, fits, the mark stays", claim: "small", size: "1Gi", advance: time.Second,
				wantState: controller.ProvisioningFinished, wantCreates: 2, wantReqs: onlyZ1, wantKnown: true},
			{name: "another 50Gi: held", claim: "big-2", size: "50Gi", advance: time.Second, wantState: controller.ProvisioningReschedule,
				wantErr: "had no room for StorageClass", wantCreates: 2, wantKnown: true, wantHeld: true},
		}},
		{name: "a refusal of a smaller claim lowers the size held", strict: true, steps: []churnStep{
			{name: "50Gi: no room", claim: "big", size: "50Gi", z1: bytesPtr(0), wantState: controller.ProvisioningReschedule,
				wantErr: string(RescheduleNoCapacity), wantCreates: 1, wantReqs: onlyZ1, wantKnown: true, wantHeld: true},
			{name: "1Gi: no room either", claim: "small", size: "1Gi", wantState: controller.ProvisioningReschedule,
				wantErr: string(RescheduleNoCapacity), wantCreates: 2, wantReqs: onlyZ1, wantKnown: true, wantHeld: true},
			{name: "another 1Gi: held", claim: "small-2", size: "1Gi", wantState: controller.ProvisioningReschedule,
				wantErr: "had no room for StorageClass", wantCreates: 2, wantKnown: true, wantHeld: true},
		}},
		{name: "strict topology: RESOURCE_EXHAUSTED marks", strict: true, steps: []churnStep{
			{name: "no room", z1: bytesPtr(0), wantState: controller.ProvisioningReschedule, wantErr: string(RescheduleNoCapacity),
				wantCreates: 1, wantReqs: onlyZ1, wantKnown: true, wantHeld: true},
			{name: "within the hold: no CreateVolume", advance: time.Second, wantState: controller.ProvisioningReschedule,
				wantErr: "had no room for StorageClass", wantCreates: 1, wantKnown: true, wantHeld: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, StrictTopology: tc.strict, FullSegmentHold: hold},
				nodes: threeZones, clock: clk})
			for _, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.advance))
				if s.z1 != nil {
					if err := e.mock.SetCapacity(map[string]string{"zone": "z1"}, *s.z1); err != nil {
						t.Fatal(err)
					}
				}
				class := s.class
				if class == "" {
					class = "c"
				}
				e.churnStep(t, s, class)
				size := resource.MustParse("1Gi")
				if s.size != "" {
					size = resource.MustParse(s.size)
				}
				if st := e.p.full.Status(class, topology.Segment{zoneKey: "z1"}, size.Value()); st.Known != s.wantKnown || st.Held != s.wantHeld {
					t.Errorf("%s: mark known %v held %v, want known %v held %v", s.name, st.Known, st.Held, s.wantKnown, s.wantHeld)
				}
				if n := len(e.mock.Volumes()); n > 1 || (n == 1 && e.mock.Volumes()[0].Segment[zoneKey] != "z1") {
					t.Errorf("%s: driver volumes %+v, want none out of z1", s.name, e.mock.Volumes())
				}
			}
		})
	}
}

// churnStep runs one step and checks the provision's outcome and the
// CreateVolume calls.
func (e *env) churnStep(t *testing.T, s churnStep, class string) {
	t.Helper()
	if s.deleteIn != "" {
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "old-" + s.deleteIn}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "gone"}},
			NodeAffinity:           zoneAffinity(s.deleteIn),
		}}
		if err := e.p.Delete(e.ctx, pv); err != nil {
			t.Fatalf("%s: Delete: %v", s.name, err)
		}
	} else {
		name := s.claim
		if name == "" {
			name = "data-" + class
		}
		claim := makePVC(name, class).withSelectedNode("n1")
		if s.size != "" {
			claim = claim.withSize(s.size)
		}
		pv, state, err := e.provision(t, claim.PersistentVolumeClaim, makeClass(class).StorageClass, makeNode("n1", "z1"))
		if state != s.wantState || (s.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), s.wantErr)) {
			t.Fatalf("%s: Provision = %v, %v; want %v with error containing %q", s.name, state, err, s.wantState, s.wantErr)
		}
		var full *fullsegments.HeldError
		if held := errors.As(err, &full); held != strings.Contains(s.wantErr, "had no room") {
			t.Errorf("%s: error %v is a HeldError: %v", s.name, err, held)
		}
		if pv != nil && pv.Spec.NodeAffinity != nil {
			if diff := cmp.Diff(zoneAffinity("z1"), pv.Spec.NodeAffinity); diff != "" {
				t.Errorf("%s: node affinity (-want +got):\n%s", s.name, diff)
			}
		}
	}
	e.checkCreates(t, s.name, s.wantCreates, s.wantReqs)
}

// checkCreates checks how many CreateVolume calls the driver has seen and,
// when wantReqs is set, the requirements of the last one.
func (e *env) checkCreates(t *testing.T, step string, wantCreates int, wantReqs *csi.TopologyRequirement) {
	t.Helper()
	e.csi.mu.Lock()
	creates := append([]*csi.CreateVolumeRequest(nil), e.csi.creates...)
	e.csi.mu.Unlock()
	if len(creates) != wantCreates {
		t.Fatalf("%s: %d CreateVolume calls, want %d", step, len(creates), wantCreates)
	}
	if wantReqs != nil {
		if diff := cmp.Diff(wantReqs, creates[len(creates)-1].GetAccessibilityRequirements(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: requirements (-want +got):\n%s", step, diff)
		}
	}
}

// wideCSI places every volume in zones z2 and z3, as a driver of
// replicated volumes whose node's zone is full.
type wideCSI struct{ ControllerClient }

func (wideCSI) CreateVolume(_ context.Context, in *csi.CreateVolumeRequest, _ ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: in.GetName(), CapacityBytes: gi, AccessibleTopology: zoneTopo("z2", "z3")}}, nil
}

func (wideCSI) DeleteVolume(context.Context, *csi.DeleteVolumeRequest, ...grpc.CallOption) (*csi.DeleteVolumeResponse, error) {
	return &csi.DeleteVolumeResponse{}, nil
}

// TestProvisionFullSegmentWideVolume: a driver that placed one volume in
// several segments is held like any other, but then asked with the usual
// requirements: the node's segment alone could never hold its volume.
func TestProvisionFullSegmentWideVolume(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, clock: clk, direct: wideCSI{}})
	claim := makePVC("data", "c").withSelectedNode("n1").PersistentVolumeClaim
	nonStrict := &csi.TopologyRequirement{Requisite: zoneTopo("z1", "z2", "z3"), Preferred: zoneTopo("z1", "z2", "z3")}
	for _, s := range []churnStep{
		{name: "placed in z2 and z3", wantState: controller.ProvisioningReschedule, wantErr: string(RescheduleVolumeNotAccessible),
			wantCreates: 1, wantReqs: nonStrict},
		{name: "within the hold", advance: time.Second, wantState: controller.ProvisioningReschedule, wantErr: "had no room for StorageClass",
			wantCreates: 1},
		{name: "after the hold: not strict", advance: time.Minute, wantState: controller.ProvisioningReschedule,
			wantErr: string(RescheduleVolumeNotAccessible), wantCreates: 2, wantReqs: nonStrict},
	} {
		clk.SetTime(clk.Now().Add(s.advance))
		_, state, err := e.provision(t, claim, makeClass("c").StorageClass, makeNode("n1", "z1"))
		if state != s.wantState || err == nil || !strings.Contains(err.Error(), s.wantErr) {
			t.Fatalf("%s: Provision = %v, %v; want %v with error containing %q", s.name, state, err, s.wantState, s.wantErr)
		}
		e.checkCreates(t, s.name, s.wantCreates, s.wantReqs)
	}
}

// TestProvisionFullSegmentPendingClaim: a claim whose earlier CreateVolume
// timed out is not held when its segment becomes known full meanwhile: the
// driver is asked again as before, so that a volume the earlier call made
// is found, not deleted by the reschedule.
func TestProvisionFullSegmentPendingClaim(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, clock: clk, mock: func(c *driver.Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "DeadlineExceeded", Count: 1}}
	}})
	class, n1 := makeClass("c").StorageClass, makeNode("n1", "z1")
	pending := makePVC("pending", "c").withSelectedNode("n1").PersistentVolumeClaim
	if _, state, _ := e.provision(t, pending, class, n1); state != controller.ProvisioningInBackground {
		t.Fatalf("first attempt state = %v, want InBackground", state)
	}
	if err := e.mock.SetCapacity(map[string]string{"zone": "z1"}, 0); err != nil {
		t.Fatal(err)
	}
	other := makePVC("other", "c").withSelectedNode("n1").PersistentVolumeClaim
	if _, _, err := e.provision(t, other, class, n1); err == nil || !strings.Contains(err.Error(), string(RescheduleVolumeNotAccessible)) {
		t.Fatalf("other claim: %v, want %s", err, RescheduleVolumeNotAccessible)
	}
	if st := e.p.full.Status("c", topology.Segment{zoneKey: "z1"}, gi); !st.Held {
		t.Fatal("z1 not held after a volume was placed out of reach")
	}
	_, _, err := e.provision(t, pending, class, n1)
	var full *fullsegments.HeldError
	if errors.As(err, &full) {
		t.Fatalf("pending claim held: %v", err)
	}
	req := e.csi.lastCreate(t)
	if req.GetName() != "pvc-uid-pending" || len(req.GetAccessibilityRequirements().GetRequisite()) != 3 {
		t.Errorf("last CreateVolume %s with requisite %v, want pvc-uid-pending with the usual requirements",
			req.GetName(), req.GetAccessibilityRequirements().GetRequisite())
	}
}
