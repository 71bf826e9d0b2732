package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestImmediateAllowedTopologiesUnknownKey: with immediate binding, a class's
// allowedTopologies restricts the volume to segments where some node of the
// driver satisfies a whole term, labels that are not driver keys included.
// A term no node satisfies goes to the driver as written, as upstream sends
// it (a node group scaled to zero has no node until a pod needs one), and
// the claim's ProvisioningSucceeded Event says so (the mock driver ignores
// a key it does not know and places the volume). A term that ANDs zones
// with a label only one node carries puts the volume in that node's zone.
func TestImmediateAllowedTopologiesUnknownKey(t *testing.T) {
	t.Run("no node satisfies the class: the terms go as written", func(t *testing.T) {
		ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
		class := lab.NewClass(t, ctx, env.Cluster, ns+"-unknown", lab.ClassOptions{Immediate: true, Terms: []v1.TopologySelectorTerm{
			{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: "example.com/unknown", Values: []string{"x"}}}},
		}})
		lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
		want := []string{"sent as written"}
		events := lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data")
		if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			events = lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data")
			return eventSays(events, "Normal", "ProvisioningSucceeded", want), nil
		}); err != nil {
			t.Fatalf("no ProvisioningSucceeded Event saying %q: %v; events:%s", want, err, events)
		}
		reqs, err := env.CreateRequests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantReq := []map[string]string{{"example.com/unknown": "x"}}
		found := false
		for _, r := range reqs {
			if r.Code == "OK" && r.Result == pv.Spec.CSI.VolumeHandle {
				found = true
				if !reflect.DeepEqual(r.Requisite, wantReq) {
					t.Errorf("CreateVolume %s requisite %v, want the term as written %v", r.Name, r.Requisite, wantReq)
				}
			}
		}
		if !found {
			t.Errorf("no CreateVolume request of the driver for PV %s", pv.Name)
		}
	})

	t.Run("zones AND a label only one node carries", func(t *testing.T) {
		ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
		const labelKey, node = "example.com/e2e-immediate-ssd", "node-z2-b"
		setNodeLabel(t, ctx, node, labelKey, "yes")
		class := lab.NewClass(t, ctx, env.Cluster, ns+"-ssd", lab.ClassOptions{Immediate: true, Terms: []v1.TopologySelectorTerm{
			{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
				{Key: zoneKey, Values: []string{"z1", "z2"}},
				{Key: labelKey, Values: []string{"yes"}},
			}},
		}})
		// Several claims: each prefers another allowed segment first, so a
		// widened requisite would show in at least one of them.
		for i := 0; i < 3; i++ {
			lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i), class, gi)
		}
		for i := 0; i < 3; i++ {
			pv := lab.WaitBound(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i))
			if zones := affinityZones(pv); !slices.Equal(zones, []string{"z2"}) {
				t.Errorf("claim data-%d: PV affinity zones %v, want [z2] (only %s carries %s)", i, zones, node, labelKey)
			}
			if seg := volumeOf(t, ctx, pv).Segment; seg[zoneKey] != "z2" || seg[rackKey] != env.Racks[node] {
				t.Errorf("claim data-%d: driver volume in %v, want the segment of %s", i, seg, node)
			}
		}
	})
}

// warningSays reports whether events (as lab.EventsOf renders them) hold a
// Warning of reason whose message contains every string of want.
func warningSays(events, reason string, want []string) bool {
	return eventSays(events, "Warning", reason, want)
}

// eventSays reports whether events (as lab.EventsOf renders them) hold an
// Event of type typ and reason whose message contains every string of want.
func eventSays(events, typ, reason string, want []string) bool {
	for _, line := range strings.Split(events, "\n") {
		msg, ok := strings.CutPrefix(strings.TrimSpace(line), typ+" "+reason+": ")
		if !ok {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(msg, w)
		}
		if all {
			return true
		}
	}
	return false
}

// volumesOfClaim counts the driver's volumes made for a claim (the volume
// name carries the claim UID).
func volumesOfClaim(t *testing.T, ctx context.Context, uid types.UID) int {
	t.Helper()
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vols {
		if strings.Contains(v.Name, string(uid)) {
			n++
		}
	}
	return n
}

// setNodeLabel sets a label on a node for the duration of the test.
func setNodeLabel(t *testing.T, ctx context.Context, node, key, value string) {
	t.Helper()
	patch := func(ctx context.Context, v any) error {
		data := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, key, v)
		_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	if err := patch(ctx, fmt.Sprintf("%q", value)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch(context.WithoutCancel(ctx), "null"); err != nil {
			t.Errorf("removing label %s from node %s: %v", key, node, err)
		}
	})
}
