package e2e

import (
	"context"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// segmentCapacities returns "zone/rack" -> bytes of a class's published
// CSIStorageCapacity objects.
func segmentCapacities(ctx context.Context, class string) (map[string]int64, error) {
	list, err := client.StorageV1().CSIStorageCapacities("csi-topology").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, c := range list.Items {
		if c.StorageClassName == class && c.Capacity != nil {
			out[c.NodeTopology.MatchLabels[zoneKey]+"/"+c.NodeTopology.MatchLabels[rackKey]] = c.Capacity.Value()
		}
	}
	return out, nil
}

// With --enable-capacity the provisioner keeps
// one CSIStorageCapacity per (segment, delayed-binding class) from the
// driver's GetCapacity, under its own RBAC, and refreshes the segment a
// provision touched at once.
func TestCapacityPublishing(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	if err := env.StartProvisioner("--enable-capacity", "--capacity-namespace=csi-topology", "--capacity-poll-interval=1h"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	var caps map[string]int64
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		caps, err = segmentCapacities(ctx, class)
		return err == nil && len(caps) == 6, nil
	})
	if err != nil {
		t.Fatalf("capacity objects for %s: %v, want 6 segments: %v", class, caps, err)
	}
	before := caps
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}})
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	vol := volumeOf(t, ctx, pv)
	seg := vol.Segment[zoneKey] + "/" + vol.Segment[rackKey]
	err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		caps, err := segmentCapacities(ctx, class)
		return err == nil && caps[seg] == before[seg]-vol.CapacityBytes, nil
	})
	if err != nil {
		caps, _ := segmentCapacities(ctx, class)
		t.Errorf("segment %s: capacity %d -> %d, want it lowered by %d right after the provision", seg, before[seg], caps[seg], vol.CapacityBytes)
	}
}
