package conformance

import (
	"context"
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// capacities returns the CSIStorageCapacity objects of the case's class,
// which --enable-capacity publishes in NAMESPACE (default).
func (r *run) capacities(ctx context.Context) ([]storagev1.CSIStorageCapacity, error) {
	list, err := env.client.StorageV1().CSIStorageCapacities(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.CSIStorageCapacity
	for _, c := range list.Items {
		if c.StorageClassName == r.className() {
			out = append(out, c)
		}
	}
	return out, nil
}

// observeCapacity waits until the class has a capacity object per zone
// and records, per object's topology, whether it has a capacity and a
// maximum volume size, its labels and owner kinds. The figures are the
// driver's, which the profile's cases share and fill at once (an
// Immediate case's segment differs between the sides): not compared.
func (r *run) observeCapacity(ctx context.Context, out map[string]string) error {
	r.waitFor(ctx, "a capacity object per zone", func(ctx context.Context) (bool, error) {
		cs, err := r.capacities(ctx)
		return len(cs) >= len(zones), err
	})
	cs, err := r.capacities(ctx)
	if err != nil {
		return err
	}
	for _, c := range cs {
		var topo []string
		if c.NodeTopology != nil {
			for k, v := range c.NodeTopology.MatchLabels {
				topo = append(topo, k+"="+v)
			}
		}
		sort.Strings(topo)
		path := "capacity[" + strings.Join(topo, ",") + "]"
		flatten(path+".capacity", c.Capacity != nil, out)
		flatten(path+".maximumVolumeSize", c.MaximumVolumeSize != nil, out)
		flatten(path+".labels", toJSON(c.Labels), out)
		var owners []string
		for _, o := range c.OwnerReferences {
			owners = append(owners, o.Kind)
		}
		flatten(path+".owners", toJSON(owners), out)
	}
	return nil
}
