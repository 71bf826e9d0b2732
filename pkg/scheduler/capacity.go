package scheduler

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// CapacitiesByClass indexes CSIStorageCapacity objects by storage class.
const CapacitiesByClass = "scheduler/capacities-by-class"

// NewCapacitySource adds the class index to a CSIStorageCapacity informer
// (before it starts) and returns a CapacitySource reading it.
func NewCapacitySource(informer cache.SharedIndexInformer) (CapacitySource, error) {
	err := informer.AddIndexers(cache.Indexers{CapacitiesByClass: func(obj any) ([]string, error) {
		if c, ok := obj.(*storagev1.CSIStorageCapacity); ok {
			return []string{c.StorageClassName}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, err
	}
	return indexedCapacities{informer.GetIndexer()}, nil
}

type indexedCapacities struct{ idx cache.Indexer }

func (i indexedCapacities) ForClass(class string) ([]*storagev1.CSIStorageCapacity, error) {
	objs, err := i.idx.ByIndex(CapacitiesByClass, class)
	if err != nil {
		return nil, err
	}
	out := make([]*storagev1.CSIStorageCapacity, 0, len(objs))
	for _, o := range objs {
		if c, ok := o.(*storagev1.CSIStorageCapacity); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func (i indexedCapacities) Version(key string) (string, bool) {
	obj, ok, err := i.idx.GetByKey(key)
	if err != nil || !ok {
		return "", false
	}
	c, ok := obj.(*storagev1.CSIStorageCapacity)
	if !ok {
		return "", false
	}
	return c.ResourceVersion, true
}
