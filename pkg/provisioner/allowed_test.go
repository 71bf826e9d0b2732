package provisioner

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// An immediate-binding class restricts the volume to segments where a node
// of the driver satisfies a whole term of allowedTopologies; when none does,
// the claim fails (final, retried by the library with backoff, which posts
// the message as a Warning ProvisioningFailed Event) and no volume is made.
func TestProvisionImmediateAllowedTopologies(t *testing.T) {
	const poolKey = "example.com/pool"
	gold := makeNode("n4", "z2")
	gold.Labels[poolKey] = "gold"
	tests := []struct {
		name      string
		terms     []v1.TopologySelectorLabelRequirement
		want      []string // requisite zones; nil: refused
		wantInErr string
	}{
		{
			name:      "label no node carries",
			terms:     []v1.TopologySelectorLabelRequirement{{Key: "example.com/unknown", Values: []string{"x"}}},
			wantInErr: `no allowed segment: no node of CSI driver "` + testDriver + `" has labels satisfying any term of the StorageClass's allowedTopologies [{example.com/unknown in (x)}]`,
		},
		{
			name:  "zones AND a label one node carries",
			terms: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"z1", "z2"}}, {Key: poolKey, Values: []string{"gold"}}},
			want:  []string{"z2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, ImmediateTopology: true}, nodes: threeZones,
				objs: []runtime.Object{gold, makeCSINode("n4", zoneKey)}})
			class := makeClass("imm").immediate()
			class.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: tc.terms}}
			pv, state, err := e.provision(t, makePVC("data", "imm").PersistentVolumeClaim, class.StorageClass, nil)
			if tc.want == nil {
				if state != controller.ProvisioningFinished || !errors.Is(err, topology.ErrNoAllowedSegment) || pv != nil {
					t.Fatalf("Provision = %v, %v, %v; want Finished with ErrNoAllowedSegment", pv, state, err)
				}
				if !strings.Contains(err.Error(), tc.wantInErr) {
					t.Errorf("error %q does not say %q", err, tc.wantInErr)
				}
				if len(e.csi.creates) != 0 || len(e.mock.Volumes()) != 0 {
					t.Errorf("CreateVolume called %d times, driver has %d volumes; want none", len(e.csi.creates), len(e.mock.Volumes()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(zoneTopo(tc.want...), e.csi.lastCreate(t).GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
				t.Errorf("requisite (-want +got):\n%s", diff)
			}
		})
	}
}
