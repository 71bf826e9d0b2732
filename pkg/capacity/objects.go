package capacity

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// existing returns the object to keep up to date per (segment, class) among
// the ones the publisher owns or adopts (its own, external-provisioner's,
// and those with a previous managed-by value of its own). With prune it
// deletes the objects of a (segment, class) that is not wanted, and the
// duplicates of one that is, which appear when two sidecars created one
// each (a swap in either direction, or an upgrade from a previous label).
func (p *Publisher) existing(ctx context.Context, wanted func(capacityKey) bool, prune bool) (map[capacityKey]*storagev1.CSIStorageCapacity, error) {
	objs, err := p.capacities.CSIStorageCapacities(p.cfg.Namespace).List(p.cfg.selector())
	if err != nil {
		return nil, err
	}
	// Deterministic: the keeper of a (segment, class) does not depend on
	// the lister's order.
	sort.Slice(objs, func(i, j int) bool { return p.preferred(objs[i], objs[j]) })
	have := map[capacityKey]*storagev1.CSIStorageCapacity{}
	for _, obj := range objs {
		key := keyOf(obj)
		_, dup := have[key]
		if !dup && wanted(key) {
			have[key] = obj
			continue
		}
		if !prune {
			continue
		}
		if !dup {
			p.objects.Delete(capacityName(p.cfg.DriverName, key.segment, key.class))
		}
		if err := p.deleteObject(ctx, obj); err != nil {
			return nil, err
		}
	}
	return have, nil
}

// keyOf is the (segment, class) an object publishes the capacity of.
func keyOf(obj *storagev1.CSIStorageCapacity) capacityKey {
	var sel map[string]string
	if obj.NodeTopology != nil {
		sel = obj.NodeTopology.MatchLabels
	}
	return capacityKey{topology.Segment(sel).String(), obj.StorageClassName}
}

// preferred orders the objects of one (segment, class) by which one to
// keep: the one with the current managed-by value (external-provisioner's
// or already adopted), then the one with the name this publisher gives,
// then the oldest, then by name.
func (p *Publisher) preferred(a, b *storagev1.CSIStorageCapacity) bool {
	if ka, kb := keyOf(a), keyOf(b); ka != kb {
		return ka.segment+"\x00"+ka.class < kb.segment+"\x00"+kb.class
	}
	if ca, cb := a.Labels[labelManagedBy] == p.cfg.ManagedBy, b.Labels[labelManagedBy] == p.cfg.ManagedBy; ca != cb {
		return ca
	}
	k := keyOf(a)
	own := capacityName(p.cfg.DriverName, k.segment, k.class)
	if oa, ob := a.Name == own, b.Name == own; oa != ob {
		return oa
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// deleteObject deletes an obsolete or duplicate object; one already gone
// (the other sidecar deleted it too) is no error.
func (p *Publisher) deleteObject(ctx context.Context, obj *storagev1.CSIStorageCapacity) error {
	err := p.client.StorageV1().CSIStorageCapacities(p.cfg.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{})
	p.metrics.ObserveWrite("delete", err)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting obsolete or duplicate capacity %s: %w", obj.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted capacity object", "name", obj.Name, "managedBy", obj.Labels[labelManagedBy],
		"segment", keyOf(obj).segment, "class", obj.StorageClassName)
	return nil
}

// objectRefresh serialises the refreshes of one capacity object and lets
// refreshes asked for while another ran share the next one's figure.
type objectRefresh struct {
	mu sync.Mutex
	// started is the ask number current when the last completed refresh
	// called GetCapacity; written is what it left in the API.
	started uint64
	written *storagev1.CSIStorageCapacity
}

// syncOne refreshes one object: GetCapacity, then a create or an update
// when the figure changed. Refreshes of one object run one at a time, so
// that provisions finishing together do not write over each other's newer
// figure or conflict. A refresh asked for before another one began its
// GetCapacity is answered by that one (its figure counts the asker's
// volume): a burst of N provisions in one segment costs about two
// GetCapacity calls and writes per object, not N, which matters under the
// capacity client's rate limit. asked is the ask number taken when the
// refresh of the whole segment was asked for (newAsk), not when this object's
// turn came: a refresh that waited on the segment's first object is still
// answered by a write of its second object that another refresh began
// meanwhile. The object last written is kept, so an update does not start
// from an informer copy that has not seen our own last write yet.
func (p *Publisher) syncOne(ctx context.Context, seg topology.Segment, class *storagev1.StorageClass, cur *storagev1.CSIStorageCapacity, asked uint64) (*storagev1.CSIStorageCapacity, error) {
	params, err := p.cfg.DriverParameters(class.Parameters)
	if err != nil {
		return nil, fmt.Errorf("class %s: %w", class.Name, err)
	}
	csc := p.client.StorageV1().CSIStorageCapacities(p.cfg.Namespace)
	name := capacityName(p.cfg.DriverName, seg.String(), class.Name)
	v, _ := p.objects.LoadOrStore(name, &objectRefresh{})
	st := v.(*objectRefresh)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.written != nil && st.started > asked {
		return st.written, nil
	}
	if st.written != nil && (cur == nil || cur.Name == st.written.Name && cur.ResourceVersion != st.written.ResourceVersion) {
		cur = st.written
	}
	st.started = p.newAsk()
	written, err := p.write(ctx, csc, name, seg, class, params, cur)
	if err == nil && written != nil {
		st.written = written
	} else {
		st.written = nil // read the informer's copy next time
	}
	return written, err
}

// write asks the driver for the segment's capacity for the class and
// creates or updates the object (cur, nil when there is none) with it.
func (p *Publisher) write(ctx context.Context, csc storagev1client.CSIStorageCapacityInterface, name string, seg topology.Segment,
	class *storagev1.StorageClass, params map[string]string, cur *storagev1.CSIStorageCapacity) (*storagev1.CSIStorageCapacity, error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.csi.GetCapacity(cctx, &csi.GetCapacityRequest{
		Parameters:         params,
		AccessibleTopology: &csi.Topology{Segments: seg},
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("GetCapacity for segment %s, class %s: %w", seg, class.Name, err)
	}
	capacity := resource.NewQuantity(resp.GetAvailableCapacity(), resource.BinarySI)
	var maxSize *resource.Quantity
	if m := resp.GetMaximumVolumeSize(); m != nil {
		maxSize = resource.NewQuantity(m.GetValue(), resource.BinarySI)
	}
	if cur == nil {
		obj := &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{labelDriverName: p.cfg.DriverName, labelManagedBy: p.cfg.ManagedBy},
			},
			NodeTopology:      &metav1.LabelSelector{MatchLabels: map[string]string(seg)},
			StorageClassName:  class.Name,
			Capacity:          capacity,
			MaximumVolumeSize: maxSize,
		}
		if p.cfg.Owner != nil {
			obj.OwnerReferences = []metav1.OwnerReference{*p.cfg.Owner}
		}
		created, err := csc.Create(ctx, obj, metav1.CreateOptions{})
		p.metrics.ObserveWrite("create", err)
		if !apierrors.IsAlreadyExists(err) {
			return created, err
		}
		// The informer has not seen our own earlier create yet: read that
		// one object (rare) and update it below.
		if cur, err = csc.Get(ctx, obj.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
	upd := cur.DeepCopy()
	adopted := p.adopt(upd)
	if !adopted && quantityEqual(cur.Capacity, capacity) && quantityEqual(cur.MaximumVolumeSize, maxSize) {
		return cur, nil
	}
	upd.Capacity, upd.MaximumVolumeSize = capacity, maxSize
	updated, err := csc.Update(ctx, upd, metav1.UpdateOptions{})
	p.metrics.ObserveWrite("update", err)
	if apierrors.IsConflict(err) {
		// Another writer (an earlier process of ours, the other sidecar
		// during a swap, a user): write over the object as the API has
		// it (one GET, rare).
		if cur, err = csc.Get(ctx, cur.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
		upd = cur.DeepCopy()
		p.adopt(upd)
		upd.Capacity, upd.MaximumVolumeSize = capacity, maxSize
		updated, err = csc.Update(ctx, upd, metav1.UpdateOptions{})
		p.metrics.ObserveWrite("update", err)
	}
	return updated, err
}

// adopt makes obj one of this publisher's own (an object of
// external-provisioner's, or one with a previous managed-by value): its
// labels, and the owner, which becomes the object's only controller so
// that the garbage collector does not delete it with the other sidecar's
// owner (the ReplicaSet of a former rollout, say), and so that
// external-provisioner can take it back after a rollback (the API refuses a
// second controller reference). Without an owner of its own the publisher
// leaves the references alone, as upstream does. It reports whether it
// changed obj.
func (p *Publisher) adopt(obj *storagev1.CSIStorageCapacity) bool {
	changed := false
	if obj.Labels[labelManagedBy] != p.cfg.ManagedBy || obj.Labels[labelDriverName] != p.cfg.DriverName {
		if obj.Labels == nil {
			obj.Labels = map[string]string{}
		}
		obj.Labels[labelManagedBy], obj.Labels[labelDriverName] = p.cfg.ManagedBy, p.cfg.DriverName
		changed = true
	}
	if p.cfg.Owner == nil {
		return changed
	}
	refs := make([]metav1.OwnerReference, 0, len(obj.OwnerReferences)+1)
	ours := false
	for _, r := range obj.OwnerReferences {
		switch {
		case r.UID == p.cfg.Owner.UID:
			ours = true
		case r.Controller != nil && *r.Controller:
			changed = true // another controller: dropped
			continue
		}
		refs = append(refs, r)
	}
	if !ours {
		refs = append(refs, *p.cfg.Owner)
		changed = true
	}
	obj.OwnerReferences = refs
	return changed
}

// capacityName is a deterministic object name for (driver, segment, class),
// so a create retried after a crash cannot leave a duplicate.
func capacityName(driver, segment, class string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(driver + "\x00" + segment + "\x00" + class))
	return fmt.Sprintf("csisc-%016x", h.Sum64())
}

func quantityEqual(a, b *resource.Quantity) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(*b) == 0
}
