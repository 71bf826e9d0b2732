package scheduler

import (
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Index names of a CSIStorageCapacity informer (see CapacityIndexers).
const (
	// CapacitiesBySegment indexes objects whose nodeTopology is matchLabels
	// only by "<class>\x00<matchLabels as topology.Segment.String>".
	CapacitiesBySegment = "scheduler/capacities-by-segment"
	// CapacityKeySets indexes the same objects by "<class>\x00<sorted
	// matchLabels keys, comma-separated>": the distinct key sets of a class,
	// so that a lookup projects a node's labels onto each of them.
	CapacityKeySets = "scheduler/capacity-key-sets"
	// CapacitiesByExpression indexes objects whose nodeTopology has
	// matchExpressions by class: the fallback list, matched one by one.
	CapacitiesByExpression = "scheduler/capacities-by-expression"
)

// CapacityIndexers are the indexes a CapacitySource reads; add them to a
// CSIStorageCapacity informer before it starts.
func CapacityIndexers() cache.Indexers {
	return cache.Indexers{
		CapacitiesBySegment: func(obj any) ([]string, error) {
			if c, ok := matchLabelsOnly(obj); ok {
				return []string{c.StorageClassName + "\x00" + topology.Segment(c.NodeTopology.MatchLabels).String()}, nil
			}
			return nil, nil
		},
		CapacityKeySets: func(obj any) ([]string, error) {
			if c, ok := matchLabelsOnly(obj); ok {
				return []string{c.StorageClassName + "\x00" + strings.Join(topology.Segment(c.NodeTopology.MatchLabels).Keys(), ",")}, nil
			}
			return nil, nil
		},
		CapacitiesByExpression: func(obj any) ([]string, error) {
			if c, ok := obj.(*storagev1.CSIStorageCapacity); ok && c.NodeTopology != nil && len(c.NodeTopology.MatchExpressions) > 0 {
				return []string{c.StorageClassName}, nil
			}
			return nil, nil
		},
	}
}

// matchLabelsOnly returns the object when its nodeTopology is a plain
// matchLabels selector. A nil nodeTopology matches no node: not indexed.
func matchLabelsOnly(obj any) (*storagev1.CSIStorageCapacity, bool) {
	c, ok := obj.(*storagev1.CSIStorageCapacity)
	if !ok || c.NodeTopology == nil || len(c.NodeTopology.MatchExpressions) > 0 {
		return nil, false
	}
	return c, true
}

// NewCapacitySource adds CapacityIndexers to a CSIStorageCapacity informer
// (before it starts) and returns a CapacitySource reading them.
func NewCapacitySource(informer cache.SharedIndexInformer) (CapacitySource, error) {
	if err := informer.AddIndexers(CapacityIndexers()); err != nil {
		return nil, err
	}
	return indexedCapacities{informer.GetIndexer()}, nil
}

// indexedCapacities implements CapacitySource on an indexer with
// CapacityIndexers.
type indexedCapacities struct{ idx cache.Indexer }

// Capacity implements CapacitySource: for each matchLabels key set of the
// class, the node's labels projected onto it name the index entry to read;
// then the class's matchExpressions objects are matched one by one.
func (i indexedCapacities) Capacity(class string, nodeLabels map[string]string) (Capacity, bool) {
	var best *storagev1.CSIStorageCapacity
	consider := func(objs []any) {
		for _, o := range objs {
			if c, ok := o.(*storagev1.CSIStorageCapacity); ok && better(c, best) {
				best = c
			}
		}
	}
	for _, keyList := range i.keySets(class) {
		seg, ok := topology.Segment(nodeLabels).Project(keyList)
		if !ok {
			continue
		}
		objs, _ := i.idx.ByIndex(CapacitiesBySegment, class+"\x00"+seg.String())
		consider(objs)
	}
	fallback, _ := i.idx.ByIndex(CapacitiesByExpression, class)
	for _, o := range fallback {
		c, ok := o.(*storagev1.CSIStorageCapacity)
		if !ok {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.NodeTopology)
		if err == nil && sel.Matches(labels.Set(nodeLabels)) && better(c, best) {
			best = c
		}
	}
	if best == nil {
		return Capacity{}, false
	}
	out := Capacity{Object: best.Namespace + "/" + best.Name, Free: bytesOf(best)}
	if best.MaximumVolumeSize != nil {
		m := best.MaximumVolumeSize.Value()
		out.MaxVolume = &m
	}
	return out, true
}

// KeySets implements KeySetSource.
func (i indexedCapacities) KeySets(class string) ([][]string, bool) {
	exprs, _ := i.idx.IndexKeys(CapacitiesByExpression, class)
	return i.keySets(class), len(exprs) > 0
}

// keySets returns the distinct matchLabels key sets of the class's objects,
// each sorted; an empty set (a selector without labels) matches every node.
func (i indexedCapacities) keySets(class string) [][]string {
	prefix := class + "\x00"
	var sets [][]string
	for _, v := range i.idx.ListIndexFuncValues(CapacityKeySets) {
		keys, ok := strings.CutPrefix(v, prefix)
		if !ok {
			continue
		}
		var set []string
		if keys != "" {
			set = strings.Split(keys, ",")
		}
		sets = append(sets, set)
	}
	return sets
}

// better orders matching objects: the largest capacity wins (as
// VolumeBinding, any object that fits will do), then the smallest
// namespace/name.
func better(c, best *storagev1.CSIStorageCapacity) bool {
	if best == nil {
		return true
	}
	if a, b := bytesOf(c), bytesOf(best); a != b {
		return a > b
	}
	if c.Namespace != best.Namespace {
		return c.Namespace < best.Namespace
	}
	return c.Name < best.Name
}

func bytesOf(c *storagev1.CSIStorageCapacity) int64 {
	if c.Capacity == nil {
		return 0
	}
	return c.Capacity.Value()
}

// Version implements CapacitySource.
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
