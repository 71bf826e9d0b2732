package e2enode

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// cacheEvents is the instances' metric of the watch events their claim and
// PV informers received.
const cacheEvents = "csi_topology_provisioner_cache_events_total"

// instanceEvents reads node's instance's cacheEvents for claims and for
// volumes.
func instanceEvents(ctx context.Context, node string) (claims, volumes float64, err error) {
	m, err := lab.Scrape(ctx, nl.Node(node).HTTPURL+"/metrics")
	if err != nil {
		return 0, 0, err
	}
	return lab.MetricValue(m, cacheEvents, map[string]string{"resource": "claims"}),
		lab.MetricValue(m, cacheEvents, map[string]string{"resource": "volumes"}), nil
}

// annotate patches an annotation on the claim and its PV.
func annotate(t *testing.T, ctx context.Context, ns string, b bound, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"e2enode.csi-topology-provisioner.io/touched":%q}}}`, value)
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, b.claim.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().PersistentVolumes().Patch(ctx, b.pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkNoOtherNodeEvents changes every bound claim of got on other nodes
// than node, and their PVs, then own (a claim of node, and its PV): node's
// instance must receive the two events of own and none of the others. A
// watch delivers a resource's events in the order of their writes, so once
// the instance counted own's it has received all the others' it would
// ever receive.
func checkNoOtherNodeEvents(t *testing.T, ctx context.Context, ns, node string, got map[string]bound, own string) {
	t.Helper()
	// The instance is idle: its counts hold still for a second.
	claims0, volumes0 := -1.0, -1.0
	if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		c, v, err := instanceEvents(ctx, node)
		if err != nil {
			return false, nil
		}
		settled := c == claims0 && v == volumes0
		claims0, volumes0 = c, v
		return settled, nil
	}); err != nil {
		t.Fatalf("%s's instance never idle: %v", node, err)
	}
	changed := 0
	value := time.Now().Format(time.RFC3339Nano)
	for _, b := range got {
		if n, _ := pvNode(b.pv); n != node {
			annotate(t, ctx, ns, b, value)
			changed += 2
		}
	}
	if changed == 0 {
		t.Fatalf("no claim of another node than %s to change", node)
	}
	annotate(t, ctx, ns, got[own], value)
	var claims, volumes float64
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, v, err := instanceEvents(ctx, node)
		if err != nil {
			return false, nil
		}
		claims, volumes = c-claims0, v-volumes0
		return claims >= 1 && volumes >= 1, nil
	}); err != nil {
		t.Fatalf("%s's instance never received the change of its own claim %s and PV: %v", node, own, err)
	}
	if claims != 1 || volumes != 1 {
		t.Errorf("after %d changes of other nodes' claims and PVs and one of its own claim and PV, %s's instance received %v claim "+
			"and %v PV events, want 1 and 1", changed, node, claims, volumes)
	}
}
