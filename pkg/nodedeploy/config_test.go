package nodedeploy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNodeDeploymentScope(t *testing.T) {
	nd := n1Deployment()
	tests := []struct {
		name      string
		nd        *Config
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
		{name: "PV with a numeric comparison (the scheduler's matcher)", nd: (&Config{NodeName: "n1",
			Topology: map[string]string{"example.com/gen": "5"}}).WithDefaults(),
			obj: pvWithTerm(v1.NodeSelectorRequirement{Key: "example.com/gen", Operator: v1.NodeSelectorOpGt, Values: []string{"3"}}), wantPV: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, isClaim := tc.obj.(*v1.PersistentVolumeClaim); isClaim {
				if got := tc.nd.OwnsClaim(tc.obj); got != tc.wantClaim {
					t.Errorf("OwnsClaim = %v, want %v", got, tc.wantClaim)
				}
				return
			}
			if got := tc.nd.OwnsVolume(tc.obj); got != tc.wantPV {
				t.Errorf("OwnsVolume = %v, want %v", got, tc.wantPV)
			}
		})
	}
}
