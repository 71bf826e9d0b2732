package provisioner

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// n1Deployment is the instance of node n1 (zone z1) of threeZones.
func n1Deployment() *nodedeploy.Config {
	return (&nodedeploy.Config{NodeName: "n1", Topology: map[string]string{zoneKey: "z1"}, ImmediateBinding: true,
		BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}).WithDefaults()
}

// A node's instance creates volumes only for claims the API shows
// selected for its node, and hands claims back while its driver is silent.
func TestNodeDeploymentProvision(t *testing.T) {
	class := makeClass("local").StorageClass
	silent := func() (bool, string) { return false, "no connection for 5s" }
	tests := []struct {
		name        string
		given       *v1.PersistentVolumeClaim // what the library hands over
		inAPI       *v1.PersistentVolumeClaim
		status      func() (bool, string)
		wantState   controller.ProvisioningState
		wantIgnored bool
		wantErr     string
		wantCreates int
		wantDeletes int
	}{
		{name: "selected for this node", given: makePVC("d", "local").withSelectedNode("n1").PersistentVolumeClaim,
			inAPI: makePVC("d", "local").withSelectedNode("n1").PersistentVolumeClaim, wantState: controller.ProvisioningFinished, wantCreates: 1},
		{name: "selected for another node", given: makePVC("d", "local").withSelectedNode("n2").PersistentVolumeClaim,
			inAPI: makePVC("d", "local").withSelectedNode("n2").PersistentVolumeClaim, wantState: controller.ProvisioningFinished, wantIgnored: true},
		{name: "cache says this node, the API another", given: makePVC("d", "local").withSelectedNode("n1").PersistentVolumeClaim,
			inAPI: makePVC("d", "local").withSelectedNode("n2").PersistentVolumeClaim, wantState: controller.ProvisioningFinished, wantIgnored: true},
		{name: "driver silent: handed back", given: makePVC("d", "local").withSelectedNode("n1").PersistentVolumeClaim,
			inAPI: makePVC("d", "local").withSelectedNode("n1").PersistentVolumeClaim, status: silent,
			wantState: controller.ProvisioningReschedule, wantErr: `CSI driver "` + testDriver + `" on node "n1" is not answering: no connection for 5s`},
		{name: "driver silent with a record of an earlier process: kept until the volume can be looked up",
			given:  makePVC("d", "local").withSelectedNode("n1").withRecord().PersistentVolumeClaim,
			inAPI:  makePVC("d", "local").withSelectedNode("n1").withRecord().PersistentVolumeClaim,
			status: silent, wantState: controller.ProvisioningInBackground, wantErr: "not handing the claim back yet"},
		{name: "handed back with a record of an earlier process: its volume is looked up and deleted first",
			given: makePVC("d", "elsewhere").withSelectedNode("n1").withRecord().PersistentVolumeClaim,
			inAPI: makePVC("d", "elsewhere").withSelectedNode("n1").withRecord().PersistentVolumeClaim,
			// The class allows only z2: n1 is ineligible.
			wantState: controller.ProvisioningReschedule, wantCreates: 1, wantDeletes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, Node: n1Deployment()}, nodes: threeZones, records: true,
				objs: []runtime.Object{tc.inAPI}, driverStatus: tc.status})
			c := class
			if tc.given.Spec.StorageClassName != nil && *tc.given.Spec.StorageClassName == "elsewhere" {
				c = makeClass("elsewhere").WithAllowedTopology(zoneKey, "z2").StorageClass
			}
			pv, state, err := e.provision(t, tc.given, c, makeNode("n1", "z1"))
			var ignored *controller.IgnoredError
			if got := errors.As(err, &ignored); got != tc.wantIgnored {
				t.Errorf("ignored = %v (err %v), want %v", got, err, tc.wantIgnored)
			}
			if state != tc.wantState {
				t.Errorf("state = %v, want %v (err %v)", state, tc.wantState, err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want one with %q", err, tc.wantErr)
			}
			if (pv != nil) != (tc.wantState == controller.ProvisioningFinished && !tc.wantIgnored) {
				t.Errorf("pv = %v", pv)
			}
			if len(e.csi.creates) != tc.wantCreates || len(e.csi.deletes) != tc.wantDeletes {
				t.Errorf("CreateVolume calls %d, DeleteVolume calls %d; want %d and %d", len(e.csi.creates), len(e.csi.deletes), tc.wantCreates, tc.wantDeletes)
			}
		})
	}
}

// The reschedule of a node's instance removes the claim's record with the
// selected node: no volume of it remains on the node.
func TestGuardRescheduleDropsRecordOfNode(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{Node: n1Deployment()}, nodes: threeZones, records: true,
		objs: []runtime.Object{makePVC("data", "local").withSelectedNode("n1").withRecord().PersistentVolumeClaim}})
	client := withRecordGuard(e.client, e.p, record.NewFakeRecorder(1))
	if _, err := client.CoreV1().PersistentVolumeClaims("apps").Update(e.ctx, makePVC("data", "local").PersistentVolumeClaim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.claim(t, "apps", "data")
	if _, ok := got.Annotations[annSelectedNode]; ok || inflight.HasFinalizer(got) {
		t.Errorf("claim after the reschedule: annotations %v, finalizers %v; want neither the selected node nor the record", got.Annotations, got.Finalizers)
	}
}

// The provisioner's answer to node n1's claimer (nodeMayTake): n1 may take
// an immediate-binding claim only while its driver answers, the class
// allows its zone, and, with capacity, its segment has room.
func TestNodeMayTake(t *testing.T) {
	silent := func() (bool, string) { return false, "no connection for 5s" }
	tests := []struct {
		name     string
		claim    *v1.PersistentVolumeClaim
		class    *storagev1.StorageClass
		capacity bool
		status   func() (bool, string)
		// wantRefusal is part of the refusal; "": n1 may take the claim.
		wantRefusal string
	}{
		{name: "unselected immediate claim", claim: makePVC("d", "imm").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().StorageClass},
		{name: "class allows another zone only", claim: makePVC("d", "imm").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().WithAllowedTopology(zoneKey, "z2").StorageClass, wantRefusal: "z1"},
		{name: "room on the node", claim: makePVC("d", "imm").withSize("5Gi").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().StorageClass, capacity: true},
		{name: "no room on the node", claim: makePVC("d", "imm").withSize("20Gi").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().StorageClass, capacity: true, wantRefusal: "bytes free on this node"},
		{name: "no room, capacity not asked", claim: makePVC("d", "imm").withSize("20Gi").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().StorageClass},
		{name: "driver silent", claim: makePVC("d", "imm").PersistentVolumeClaim,
			class: makeClass("imm").Immediate().StorageClass, status: silent, wantRefusal: "is not answering: no connection for 5s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, Node: n1Deployment()}, nodes: threeZones, records: true,
				objs: []runtime.Object{tc.claim, tc.class}, driverStatus: tc.status})
			got := e.p.nodeMayTake(tc.capacity)(e.ctx, tc.claim, tc.class, makeNode("n1", "z1"))
			if (got == "") != (tc.wantRefusal == "") || !strings.Contains(got, tc.wantRefusal) {
				t.Errorf("refusal %q, want one with %q", got, tc.wantRefusal)
			}
		})
	}
}
