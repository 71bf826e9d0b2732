package provisioner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// n1Deployment is the instance of node n1 (zone z1) of threeZones.
func n1Deployment() *NodeDeployment {
	return (&NodeDeployment{NodeName: "n1", Topology: map[string]string{zoneKey: "z1"}, ImmediateBinding: true,
		BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}).withDefaults()
}

// pvWithTerm is a PV whose required node affinity is the one term of
// these expressions.
func pvWithTerm(exprs ...v1.NodeSelectorRequirement) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: exprs}}}}
	return pv
}

func pvWithZones(zones ...string) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	if len(zones) == 0 {
		return pv
	}
	var terms []v1.NodeSelectorTerm
	for _, z := range zones {
		terms = append(terms, v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{z}}}})
	}
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}
	return pv
}

func TestNodeDeploymentScope(t *testing.T) {
	nd := n1Deployment()
	tests := []struct {
		name      string
		nd        *NodeDeployment
		obj       any
		wantClaim bool
		wantPV    bool
	}{
		{name: "central provisioner: every claim", obj: makePVC("a", "c").withSelectedNode("n2").PersistentVolumeClaim, wantClaim: true},
		{name: "central provisioner: every PV", obj: pvWithZones("z2"), wantPV: true},
		{name: "claim selected for this node", nd: nd, obj: makePVC("a", "c").withSelectedNode("n1").PersistentVolumeClaim, wantClaim: true},
		{name: "claim selected for another node", nd: nd, obj: makePVC("a", "c").withSelectedNode("n2").PersistentVolumeClaim},
		{name: "claim without a selected node", nd: nd, obj: makePVC("a", "c").PersistentVolumeClaim},
		{name: "PV of this node's segment", nd: nd, obj: pvWithZones("z1"), wantPV: true},
		{name: "PV reachable from several segments, this one among them", nd: nd, obj: pvWithZones("z2", "z1"), wantPV: true},
		{name: "PV of another segment", nd: nd, obj: pvWithZones("z2")},
		{name: "PV without node affinity (reachable everywhere, as upstream)", nd: nd, obj: pvWithZones(), wantPV: true},
		{name: "PV of several zones in one expression, this one among them", nd: nd,
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z2", "z1"}}), wantPV: true},
		{name: "PV of several zones in one expression, not this one", nd: nd,
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z2", "z3"}})},
		{name: "PV of every zone but this one", nd: nd,
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpNotIn, Values: []string{"z1"}})},
		{name: "PV needing a label this node lacks", nd: nd,
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}},
				v1.NodeSelectorRequirement{Key: "example.com/rack", Operator: v1.NodeSelectorOpExists})},
		{name: "PV term with no requirements admits nothing", nd: nd, obj: pvWithTerm()},
		{name: "PV matching the node by name (matchFields, the scheduler's matcher)", nd: nd, obj: func() *v1.PersistentVolume {
			pv := pvWithTerm()
			pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchFields = []v1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}
			return pv
		}(), wantPV: true},
		{name: "PV with a numeric comparison (the scheduler's matcher)", nd: (&NodeDeployment{NodeName: "n1",
			Topology: map[string]string{"example.com/gen": "5"}}).withDefaults(),
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: "example.com/gen", Operator: v1.NodeSelectorOpGt, Values: []string{"3"}}), wantPV: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, isClaim := tc.obj.(*v1.PersistentVolumeClaim); isClaim {
				if got := tc.nd.ownsClaim(tc.obj); got != tc.wantClaim {
					t.Errorf("ownsClaim = %v, want %v", got, tc.wantClaim)
				}
				return
			}
			if got := tc.nd.ownsVolume(tc.obj); got != tc.wantPV {
				t.Errorf("ownsVolume = %v, want %v", got, tc.wantPV)
			}
		})
	}
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
				c = makeClass("elsewhere").withAllowedZones("z2").StorageClass
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
	if _, ok := got.Annotations[annSelectedNode]; ok || HasInFlightFinalizer(got) {
		t.Errorf("claim after the reschedule: annotations %v, finalizers %v; want neither the selected node nor the record", got.Annotations, got.Finalizers)
	}
}

// The claimer of node n1 takes an immediate-binding claim only when n1 can
// host it, and writes the selection conditioned on the claim's version.
func TestNodeClaimerAttempt(t *testing.T) {
	tests := []struct {
		name     string
		claim    *v1.PersistentVolumeClaim
		classObj runtime.Object
		capacity bool
		conflict bool
		// unannotated: the PV controller has not set the storage-provisioner annotation yet.
		unannotated bool
		wantNode    string
		wantTry     int
	}{
		{name: "unselected immediate claim taken", claim: makePVC("d", "imm").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, wantNode: "n1"},
		{name: "not left to the driver by the PV controller yet", claim: makePVC("d", "imm").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, unannotated: true},
		{name: "class allows another zone only", claim: makePVC("d", "imm").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().withAllowedZones("z2").StorageClass, wantTry: 1},
		{name: "delayed-binding class: the scheduler's business", claim: makePVC("d", "wffc").PersistentVolumeClaim,
			classObj: makeClass("wffc").StorageClass},
		{name: "already selected by another node", claim: makePVC("d", "imm").withSelectedNode("n2").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, wantNode: "n2"},
		{name: "room on the node", claim: makePVC("d", "imm").withSize("5Gi").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, capacity: true, wantNode: "n1"},
		{name: "no room on the node", claim: makePVC("d", "imm").withSize("20Gi").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, capacity: true, wantTry: 1},
		{name: "lost the race", claim: makePVC("d", "imm").PersistentVolumeClaim,
			classObj: makeClass("imm").immediate().StorageClass, conflict: true, wantTry: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := tc.claim.DeepCopy()
			if !tc.unannotated {
				if claim.Annotations == nil {
					claim.Annotations = map[string]string{}
				}
				claim.Annotations[annStorageProvisioner] = testDriver
			}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, Node: n1Deployment()}, nodes: threeZones, records: true,
				objs: []runtime.Object{claim, tc.classObj}})
			if tc.conflict {
				e.client.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "d", errors.New("changed"))
				})
			}
			factory := informers.NewSharedInformerFactory(e.client, 0)
			claims := factory.Core().V1().PersistentVolumeClaims().Informer()
			classes := factory.Storage().V1().StorageClasses().Lister()
			nodes := factory.Core().V1().Nodes().Lister()
			cl, err := newNodeClaimer(e.p.cfg.Node, e.p, claims, classes, nodes, e.client.CoreV1(), tc.capacity)
			if err != nil {
				t.Fatal(err)
			}
			factory.Start(e.ctx.Done())
			factory.WaitForCacheSync(e.ctx.Done())
			cl.attempt(e.ctx, cache.ObjectName{Namespace: "apps", Name: "d"})
			after := e.claim(t, "apps", "d")
			if got := after.Annotations[annSelectedNode]; got != tc.wantNode {
				t.Errorf("selected node %q, want %q", got, tc.wantNode)
			}
			// Taking the claim labels it with the node in the same Update
			// (selection by label): it leaves the pool for this node.
			if got, taken := after.Labels[nodelabel.Key], tc.wantNode == "n1"; (got == nodelabel.NodeValue("n1")) != taken {
				t.Errorf("label %s=%q, want the node's value: %t", nodelabel.Key, got, taken)
			}
			if got := cl.tries[tc.claim.UID]; got != tc.wantTry {
				t.Errorf("failed attempts %d, want %d", got, tc.wantTry)
			}
		})
	}
}

// The waits grow from a random share of BaseDelay to at most MaxDelay.
func TestNodeClaimerWait(t *testing.T) {
	cl := &nodeClaimer{node: &NodeDeployment{BaseDelay: time.Second, MaxDelay: 8 * time.Second}, tries: map[types.UID]int{}}
	for range 50 {
		if d := cl.wait("a"); d < 0 || d > time.Second {
			t.Fatalf("first wait %s, want within [0, 1s]", d)
		}
	}
	for tries, max := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 10: 8 * time.Second, 100: 8 * time.Second} {
		cl.tries["a"] = tries
		for range 50 {
			if d := cl.wait("a"); d < max/2 || d > max {
				t.Fatalf("wait after %d failures %s, want within [%s, %s]", tries, d, max/2, max)
			}
		}
	}
}

// A node's instance caches other nodes' claims as stubs, its own and the
// unselected pending ones whole.
func TestNodeDeploymentTrimsForeignClaims(t *testing.T) {
	nd := n1Deployment()
	bound := makePVC("b", "c").PersistentVolumeClaim
	bound.Spec.VolumeName = "pv-b"
	tests := []struct {
		name     string
		claim    *v1.PersistentVolumeClaim
		wantStub bool
	}{
		{name: "selected for this node", claim: makePVC("a", "c").withSelectedNode("n1").PersistentVolumeClaim},
		{name: "pending without a node (an immediate claim to race for)", claim: makePVC("a", "c").PersistentVolumeClaim},
		{name: "selected for another node", claim: makePVC("a", "c").withSelectedNode("n2").withRecord().PersistentVolumeClaim, wantStub: true},
		{name: "bound, no node", claim: bound, wantStub: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.claim.DeepCopy()
			in.Labels = map[string]string{"app": "x"}
			in.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
			src := &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
			in.Spec.DataSource = src
			out, err := nd.trimForCache(in)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*v1.PersistentVolumeClaim)
			if got.ManagedFields != nil {
				t.Error("managedFields kept")
			}
			isStub := got.Labels == nil && len(got.Spec.Resources.Requests) == 0
			if isStub != tc.wantStub {
				t.Fatalf("stub = %v, want %v: %+v", isStub, tc.wantStub, got)
			}
			if got.Name != in.Name || got.UID != in.UID || got.Spec.VolumeName != in.Spec.VolumeName || got.Spec.DataSource != src ||
				got.Annotations[annSelectedNode] != in.Annotations[annSelectedNode] || HasInFlightFinalizer(got) != HasInFlightFinalizer(in) {
				t.Errorf("trimmed claim lost what the instance reads: %+v", got)
			}
		})
	}
}

// A node's instance caches other nodes' PVs as stubs, its own whole.
func TestNodeDeploymentTrimsForeignPVs(t *testing.T) {
	nd := n1Deployment()
	full := func(zone string) *v1.PersistentVolume {
		pv := pvWithZones(zone)
		pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": testDriver}
		pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: *resourceQuantity(gi)}
		pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1", VolumeAttributes: map[string]string{"a": "b"}}
		pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: "apps", Name: "data", UID: "uid-data"}
		pv.Status.Phase = v1.VolumeBound
		return pv
	}
	own, err := nd.trimForCache(full("z1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(full("z1"), own); diff != "" {
		t.Errorf("own PV changed (-want +got):\n%s", diff)
	}
	got, err := nd.trimForCache(full("z2"))
	if err != nil {
		t.Fatal(err)
	}
	stub := got.(*v1.PersistentVolume)
	want := full("z2")
	if stub.Annotations != nil || stub.Spec.Capacity != nil || stub.Spec.CSI.VolumeAttributes != nil {
		t.Errorf("stub keeps what no consumer reads: %+v", stub)
	}
	if stub.Spec.CSI.VolumeHandle != "vol-1" || stub.Spec.ClaimRef.UID != "uid-data" || stub.Status.Phase != v1.VolumeBound ||
		!cmp.Equal(stub.Spec.NodeAffinity, want.Spec.NodeAffinity) || nd.ownsVolume(stub) {
		t.Errorf("stub lost what the instance reads: %+v", stub)
	}
}
