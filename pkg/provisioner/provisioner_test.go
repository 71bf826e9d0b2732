package provisioner

import (
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

var threeZones = map[string]string{"n1": "z1", "n2": "z2", "n3": "z3"}

func zoneTopo(zones ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, z := range zones {
		out = append(out, &csi.Topology{Segments: map[string]string{zoneKey: z}})
	}
	return out
}

func zoneAffinity(zone string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{zone}}},
	}}}}
}

func TestProvisionDelayedBinding(t *testing.T) {
	tests := []struct {
		name          string
		strict        bool
		class         classBuilder
		node          string
		wantRequisite []*csi.Topology
		wantPreferred []*csi.Topology
		wantZone      string
	}{
		{
			name: "volume in the selected node's zone", class: makeClass("zonal"), node: "n2",
			wantRequisite: zoneTopo("z1", "z2", "z3"), wantPreferred: zoneTopo("z2", "z3", "z1"), wantZone: "z2",
		},
		{
			name: "strict topology", strict: true, class: makeClass("zonal"), node: "n2",
			wantRequisite: zoneTopo("z2"), wantPreferred: zoneTopo("z2"), wantZone: "z2",
		},
		{
			name: "allowedTopologies limit requisite", class: makeClass("two").WithAllowedTopology(zoneKey, "z1", "z3"), node: "n3",
			wantRequisite: zoneTopo("z1", "z3"), wantPreferred: zoneTopo("z3", "z1"), wantZone: "z3",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, StrictTopology: tc.strict}, nodes: threeZones})
			claim := makePVC("data", tc.class.Name).withSelectedNode(tc.node)
			pv, state, err := e.provision(t, claim.PersistentVolumeClaim, tc.class.StorageClass, makeNode(tc.node, threeZones[tc.node]))
			if err != nil || state != controller.ProvisioningFinished {
				t.Fatalf("Provision = %v, %v", state, err)
			}
			req := e.csi.lastCreate(t)
			if diff := cmp.Diff(&csi.TopologyRequirement{Requisite: tc.wantRequisite, Preferred: tc.wantPreferred},
				req.GetAccessibilityRequirements(), protocmp.Transform()); diff != "" {
				t.Errorf("requirements (-want +got):\n%s", diff)
			}
			if req.GetName() != "pvc-uid-data" {
				t.Errorf("volume name = %q, want pvc-uid-data", req.GetName())
			}
			if diff := cmp.Diff(zoneAffinity(tc.wantZone), pv.Spec.NodeAffinity); diff != "" {
				t.Errorf("node affinity (-want +got):\n%s", diff)
			}
			vols := e.mock.Volumes()
			if len(vols) != 1 || vols[0].Segment[zoneKey] != tc.wantZone || vols[0].ID != pv.Spec.CSI.VolumeHandle {
				t.Errorf("driver volumes = %+v, want one in %s with handle %s", vols, tc.wantZone, pv.Spec.CSI.VolumeHandle)
			}
			d, _ := e.p.deps.Decisions.Take(claim.UID)
			decision := d.Placement
			if !strings.Contains(decision, "selected node "+tc.node) || !strings.Contains(decision, "zone="+tc.wantZone) {
				t.Errorf("decision %q does not name the node and zone", decision)
			}
		})
	}
}

func TestProvisionPV(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, DefaultFSType: "ext4", Identity: "1700000000000-42-" + testDriver}, nodes: threeZones})
	retain := v1.PersistentVolumeReclaimRetain
	class := makeClass("c").WithParams("type", "fast")
	class.ReclaimPolicy = &retain
	class.MountOptions = []string{"noatime"}
	claim := makePVC("db", "c").withSelectedNode("n1").withSize("3Gi")
	pv, _, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, makeNode("n1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	want := v1.PersistentVolumeSpec{
		AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		MountOptions:                  []string{"noatime"},
		PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
		Capacity:                      v1.ResourceList{v1.ResourceStorage: *resourceQuantity(3 * gi)},
		NodeAffinity:                  zoneAffinity("z1"),
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
			Driver:       testDriver,
			VolumeHandle: pv.Spec.CSI.VolumeHandle,
			FSType:       "ext4",
			VolumeAttributes: map[string]string{
				driver.ContextSegment:                          zoneKey + "=z1",
				"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-42-" + testDriver,
			},
		}},
	}
	if diff := cmp.Diff(want, pv.Spec); diff != "" {
		t.Errorf("PV spec (-want +got):\n%s", diff)
	}
	if pv.Name != "pvc-uid-db" {
		t.Errorf("PV name = %q", pv.Name)
	}
	if diff := cmp.Diff(map[string]string{"type": "fast"}, e.csi.lastCreate(t).GetParameters()); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
}

func TestProvisionReschedule(t *testing.T) {
	tests := []struct {
		name       string
		node       *v1.Node
		class      classBuilder
		mock       func(*driver.Config)
		wantReason topology.NodeReason
	}{
		{name: "node has no CSINode", node: makeNode("lonely", "z1"), class: makeClass("c"), wantReason: topology.CSINodeMissing},
		{name: "driver not registered on the node", node: makeNode("foreign", "z1"), class: makeClass("c"), wantReason: topology.DriverNotRegistered},
		{name: "node lacks the zone label", node: makeNode("n1", ""), class: makeClass("c"), wantReason: topology.TopologyLabelMissing},
		{name: "node outside allowedTopologies", node: makeNode("n3", "z3"), class: makeClass("c").WithAllowedTopology(zoneKey, "z1", "z2"), wantReason: topology.OutsideAllowedTopologies},
		{name: "node gone", node: nil, class: makeClass("c"), wantReason: topology.NodeNotFound},
		{
			name: "selected zone is full", node: makeNode("n2", "z2"), class: makeClass("c"),
			mock: func(c *driver.Config) {
				c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Segment: map[string]string{"zone": "z2"}}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foreign := makeCSINode("foreign", zoneKey)
			foreign.Spec.Drivers[0].Name = "other.example.com"
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, mock: tc.mock,
				objs: []runtime.Object{makeNode("foreign", "z1"), foreign}})
			name := "lonely"
			if tc.node != nil {
				name = tc.node.Name
			}
			claim := makePVC("data", "c").withSelectedNode(name)
			_, state, err := e.provision(t, claim.PersistentVolumeClaim, tc.class.StorageClass, tc.node)
			if state != controller.ProvisioningReschedule || err == nil {
				t.Fatalf("Provision = %v, %v; want Reschedule with an error", state, err)
			}
			if tc.wantReason != "" {
				var ne *topology.NodeError
				if !errors.As(err, &ne) || ne.Reason != tc.wantReason {
					t.Errorf("error %v, want reason %s", err, tc.wantReason)
				}
			}
			if !strings.Contains(err.Error(), "asking the scheduler to pick another node") {
				t.Errorf("error %q does not say the claim goes back to the scheduler", err)
			}
			if n := len(e.mock.Volumes()); n != 0 {
				t.Errorf("driver has %d volumes after a reschedule", n)
			}
		})
	}
}

func TestProvisionErrorStates(t *testing.T) {
	tests := []struct {
		name      string
		code      string
		immediate bool
		want      controller.ProvisioningState
	}{
		{name: "unavailable retries in background", code: "Unavailable", want: controller.ProvisioningInBackground},
		{name: "deadline exceeded retries in background", code: "DeadlineExceeded", want: controller.ProvisioningInBackground},
		{name: "aborted retries in background", code: "Aborted", want: controller.ProvisioningInBackground},
		{name: "canceled retries in background", code: "Canceled", want: controller.ProvisioningInBackground},
		{name: "invalid argument is final", code: "InvalidArgument", want: controller.ProvisioningFinished},
		{name: "internal is final", code: "Internal", want: controller.ProvisioningFinished},
		{name: "resource exhausted without selected node is final", code: "ResourceExhausted", immediate: true, want: controller.ProvisioningFinished},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, mock: func(c *driver.Config) {
				c.Faults = []faults.Rule{{Method: "CreateVolume", Code: tc.code, Count: 1}}
			}})
			claim := makePVC("data", "c")
			class := makeClass("c").Immediate()
			var node *v1.Node
			if !tc.immediate {
				claim = claim.withSelectedNode("n1")
				class = makeClass("c")
				node = makeNode("n1", "z1")
			}
			_, state, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, node)
			if state != tc.want || err == nil {
				t.Fatalf("Provision = %v, %v; want %v with an error", state, err, tc.want)
			}
			// The fault fired once; the retry with the same name succeeds.
			pv, state, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, node)
			if err != nil || state != controller.ProvisioningFinished || pv == nil {
				t.Fatalf("retry = %v, %v", state, err)
			}
			if n := len(e.mock.Volumes()); n != 1 {
				t.Errorf("driver has %d volumes, want 1", n)
			}
		})
	}
}

// A claim that timed out and then must be rescheduled first deletes the
// volume the earlier attempt may have created.
func TestRescheduleAfterBackgroundDeletesPendingVolume(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, mock: func(c *driver.Config) {
		c.Faults = []faults.Rule{{Method: "CreateVolume", Code: "DeadlineExceeded", Count: 1}}
	}})
	claim := makePVC("data", "c").withSelectedNode("n1")
	class := makeClass("c")
	if _, state, _ := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, makeNode("n1", "z1")); state != controller.ProvisioningInBackground {
		t.Fatalf("first attempt state = %v", state)
	}
	// The node disappears meanwhile: reschedule, after deleting the name.
	_, state, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, nil)
	if state != controller.ProvisioningReschedule {
		t.Fatalf("state = %v, %v; want Reschedule", state, err)
	}
	if len(e.csi.deletes) != 1 || e.csi.deletes[0].GetVolumeId() != "pvc-uid-data" {
		t.Errorf("deletes = %v, want one of pvc-uid-data", e.csi.deletes)
	}
}

func TestProvisionImmediate(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, ImmediateTopology: true}, nodes: threeZones})
	class := makeClass("imm").Immediate().WithAllowedTopology(zoneKey, "z2", "z3")
	pv, _, err := e.provision(t, makePVC("data-web-0", "imm").PersistentVolumeClaim, class.StorageClass, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(zoneTopo("z2", "z3"), e.csi.lastCreate(t).GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
		t.Errorf("requisite (-want +got):\n%s", diff)
	}
	zone := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]
	if zone != "z2" && zone != "z3" {
		t.Errorf("volume in %s, outside allowedTopologies", zone)
	}
}

func TestProvisionWithoutTopologySupport(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: false}, nodes: threeZones, mock: func(c *driver.Config) { c.DisableTopology = true }})
	pv, _, err := e.provision(t, makePVC("data", "plain").PersistentVolumeClaim, makeClass("plain").Immediate().StorageClass, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.NodeAffinity != nil || e.csi.lastCreate(t).GetAccessibilityRequirements() != nil {
		t.Errorf("topology used although the driver does not support it: %v", pv.Spec.NodeAffinity)
	}
}

func TestProvisionBadInput(t *testing.T) {
	tests := []struct {
		name    string
		class   classBuilder
		claim   claimBuilder
		wantErr error
	}{
		{name: "unknown reserved parameter", class: makeClass("c").Immediate().WithParams("csi.storage.k8s.io/fs-type", "xfs"), claim: makePVC("a", "c"), wantErr: ErrInvalidParameter},
		{name: "bad secret template", class: makeClass("c").Immediate().WithParams(
			"csi.storage.k8s.io/provisioner-secret-name", "${pvc.uid}", "csi.storage.k8s.io/provisioner-secret-namespace", "ns"),
			claim: makePVC("a", "c"), wantErr: ErrSecretTemplate},
		{name: "invalid allowedTopologies", class: func() classBuilder {
			c := makeClass("c").Immediate()
			c.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey}}}}
			return c
		}(), claim: makePVC("a", "c"), wantErr: topology.ErrInvalidTopology},
		{name: "claim with a selector", class: makeClass("c").Immediate(), claim: func() claimBuilder {
			c := makePVC("a", "c")
			c.Spec.Selector = &metav1.LabelSelector{}
			return c
		}(), wantErr: ErrInvalidClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
			_, state, err := e.provision(t, tc.claim.PersistentVolumeClaim, tc.class.StorageClass, nil)
			if state != controller.ProvisioningFinished || !errors.Is(err, tc.wantErr) {
				t.Fatalf("Provision = %v, %v; want Finished with %v", state, err, tc.wantErr)
			}
			if len(e.csi.creates) != 0 {
				t.Error("CreateVolume called for bad input")
			}
		})
	}
	t.Run("impossible size", func(t *testing.T) {
		e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
		_, state, err := e.provision(t, makePVC("huge", "c").withSize("4Pi").PersistentVolumeClaim, makeClass("c").Immediate().StorageClass, nil)
		if state != controller.ProvisioningFinished || err == nil || !strings.Contains(err.Error(), "OutOfRange") {
			t.Fatalf("Provision = %v, %v; want a final OutOfRange error", state, err)
		}
	})
	t.Run("class of another provisioner is ignored", func(t *testing.T) {
		e := newEnv(t, envOptions{nodes: threeZones})
		class := makeClass("other")
		class.Provisioner = "other.example.com"
		_, _, err := e.provision(t, makePVC("a", "other").PersistentVolumeClaim, class.StorageClass, nil)
		var ignored *controller.IgnoredError
		if !errors.As(err, &ignored) {
			t.Fatalf("error = %v, want IgnoredError", err)
		}
	})
}

// Without strict topology the driver may fall back to another requisite
// segment when the node's is full; such a volume is useless for the pod, so
// it is deleted and the claim goes back to the scheduler.
func TestProvisionVolumeOutsideNodeSegment(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
	if err := e.mock.SetCapacity(map[string]string{"zone": "z2"}, 0); err != nil {
		t.Fatal(err)
	}
	claim := makePVC("data", "c").withSelectedNode("n2")
	_, state, err := e.provision(t, claim.PersistentVolumeClaim, makeClass("c").StorageClass, makeNode("n2", "z2"))
	if state != controller.ProvisioningReschedule || err == nil || !strings.Contains(err.Error(), string(RescheduleVolumeNotAccessible)) {
		t.Fatalf("Provision = %v, %v; want Reschedule (%s)", state, err, RescheduleVolumeNotAccessible)
	}
	if n := len(e.mock.Volumes()); n != 0 {
		t.Errorf("driver keeps %d volumes made in the wrong segment", n)
	}
}
