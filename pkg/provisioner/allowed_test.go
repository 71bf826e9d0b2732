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

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// An immediate-binding class restricts the volume to segments where a node
// of the driver satisfies a whole term of allowedTopologies; when none does
// (a node group scaled to zero), the terms go to the driver as written, as
// upstream sends them, and the ProvisioningSucceeded Event says so.
func TestProvisionImmediateAllowedTopologies(t *testing.T) {
	const poolKey = "example.com/pool"
	gold := makeNode("n4", "z2")
	gold.Labels[poolKey] = "gold"
	tests := []struct {
		name      string
		terms     []v1.TopologySelectorLabelRequirement
		want      []string // requisite zones; nil: refused
		wantInErr string
		// wantAsWritten: the terms went as written, and the decision
		// says so.
		wantAsWritten bool
		// wantCreates: CreateVolume calls of a refused claim.
		wantCreates int
	}{
		{
			name:      "a term without expressions",
			terms:     []v1.TopologySelectorLabelRequirement{},
			wantInErr: `no allowed segment: the StorageClass's allowedTopologies [{}] allow no segment`,
		},
		{
			name:      "a zone without a node that the driver lacks too: its refusal says the terms went as written",
			terms:     []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"z7"}}},
			wantInErr: termsAsWrittenNote, wantCreates: 1,
		},
		{
			name:          "zones without a node yet: sent as written",
			terms:         []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"z8", "z9"}}},
			want:          []string{"z8", "z9"},
			wantAsWritten: true,
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
				objs: []runtime.Object{gold, makeCSINode("n4", zoneKey)}, mock: func(c *driver.Config) {
					// Zones whose nodes have not come up yet.
					for _, z := range []string{"z8", "z9"} {
						c.Segments = append(c.Segments, driver.SegmentConfig{Topology: map[string]string{"zone": z}, CapacityBytes: 10 * gi})
					}
				}})
			class := makeClass("imm").Immediate()
			class.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: tc.terms}}
			pv, state, err := e.provision(t, makePVC("data", "imm").PersistentVolumeClaim, class.StorageClass, nil)
			if tc.want == nil {
				if state != controller.ProvisioningFinished || err == nil || pv != nil {
					t.Fatalf("Provision = %v, %v, %v; want Finished with an error", pv, state, err)
				}
				if !strings.Contains(err.Error(), tc.wantInErr) {
					t.Errorf("error %q does not say %q", err, tc.wantInErr)
				}
				if noSegment := errors.Is(err, topology.ErrNoAllowedSegment); noSegment != (tc.wantCreates == 0) {
					t.Errorf("error %q is ErrNoAllowedSegment: %t", err, noSegment)
				}
				if len(e.csi.creates) != tc.wantCreates || len(e.mock.Volumes()) != 0 {
					t.Errorf("CreateVolume called %d times, driver has %d volumes; want %d calls and no volume", len(e.csi.creates), len(e.mock.Volumes()), tc.wantCreates)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(zoneTopo(tc.want...), e.csi.lastCreate(t).GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
				t.Errorf("requisite (-want +got):\n%s", diff)
			}
			d, _ := e.p.deps.Decisions.Take("uid-data")
			if got := strings.Contains(d.Placement, termsAsWrittenNote); got != tc.wantAsWritten {
				t.Errorf("decision %q says the terms went as written: %t, want %t", d.Placement, got, tc.wantAsWritten)
			}
		})
	}
}
