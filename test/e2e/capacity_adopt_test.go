package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const capacityNamespace = "csi-topology"

// capacityObject is a CSIStorageCapacity of the mock driver for a class in
// one zone/rack segment, labelled managed-by as the sidecar named so
// would, with a generated name as external-provisioner gives.
func capacityObject(managedBy, class, zone, rack string) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "csisc-",
			Labels:       map[string]string{"csi.storage.k8s.io/drivername": driverName, "csi.storage.k8s.io/managed-by": managedBy},
		},
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{zoneKey: zone, rackKey: rack}},
		StorageClassName: class,
		Capacity:         resource.NewQuantity(1, resource.BinarySI),
	}
}

// classCapacityObjects returns the capacity objects of a class, by name.
func classCapacityObjects(ctx context.Context, class string) (map[string]storagev1.CSIStorageCapacity, error) {
	list, err := client.StorageV1().CSIStorageCapacities(capacityNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]storagev1.CSIStorageCapacity{}
	for _, c := range list.Items {
		if c.StorageClassName == class {
			out[c.Name] = c
		}
	}
	return out, nil
}

// describeCapacities is "name segment managed-by capacity" per object.
func describeCapacities(objs map[string]storagev1.CSIStorageCapacity) []string {
	var out []string
	for _, c := range objs {
		out = append(out, fmt.Sprintf("%s %v %s %v", c.Name, c.NodeTopology.MatchLabels, c.Labels["csi.storage.k8s.io/managed-by"], c.Capacity))
	}
	sort.Strings(out)
	return out
}

// Swapping external-provisioner for csi-provisioner (or upgrading from a
// release with the previous managed-by label): the capacity objects the
// earlier sidecar left are adopted, so that after a sync there is exactly
// one object per (segment, class), external-provisioner's kept and updated
// in place, the duplicate and the obsolete ones deleted, and the previous
// label's one relabelled.
func TestCapacityAdoptsExternalProvisionerObjects(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	csc := client.StorageV1().CSIStorageCapacities(capacityNamespace)
	t.Cleanup(func() {
		objs, _ := classCapacityObjects(context.WithoutCancel(ctx), class)
		for name := range objs {
			_ = csc.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
		}
	})
	pre := []*storagev1.CSIStorageCapacity{
		capacityObject("external-provisioner", class, "z1", "r1"),     // kept
		capacityObject("external-provisioner", class, "z1", "r1"),     // duplicate
		capacityObject("external-provisioner", class, "z9", "r1"),     // no such segment
		capacityObject("csi-topology-provisioner", class, "z2", "r2"), // previous label
	}
	created := make([]*storagev1.CSIStorageCapacity, len(pre))
	for i, obj := range pre {
		var err error
		if created[i], err = csc.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The kept one is the oldest of the two of z1/r1.
	if created[0].CreationTimestamp.Equal(&created[1].CreationTimestamp) && created[1].Name < created[0].Name {
		created[0], created[1] = created[1], created[0]
	}
	if err := env.StartProvisioner("--enable-capacity", "--capacity-namespace="+capacityNamespace, "--capacity-poll-interval=1h"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })

	var objs map[string]storagev1.CSIStorageCapacity
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		if objs, err = classCapacityObjects(ctx, class); err != nil || len(objs) != 6 {
			return false, nil
		}
		segments := map[string]bool{}
		for _, c := range objs {
			segments[c.NodeTopology.MatchLabels[zoneKey]+"/"+c.NodeTopology.MatchLabels[rackKey]] = true
			if c.Labels["csi.storage.k8s.io/managed-by"] != "external-provisioner" || c.Capacity.Value() == 1 {
				return false, nil
			}
		}
		_, kept := objs[created[0].Name]
		_, relabelled := objs[created[3].Name]
		return len(segments) == 6 && kept && relabelled, nil
	})
	if err != nil {
		t.Fatalf("capacity objects of %s: %v; want one per segment (6), managed-by external-provisioner, refreshed, "+
			"%s (external-provisioner's) and %s (previous label) kept: %v", class, describeCapacities(objs), created[0].Name, created[3].Name, err)
	}
}
