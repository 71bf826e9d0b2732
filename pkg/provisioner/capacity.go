package provisioner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	labelselection "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Labels on the CSIStorageCapacity objects this provisioner owns.
const (
	labelDriverName = "csi.storage.k8s.io/drivername"
	labelManagedBy  = "csi.storage.k8s.io/managed-by"
)

// CapacityClient is the CSI call capacity publishing needs.
type CapacityClient interface {
	GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, opts ...grpc.CallOption) (*csi.GetCapacityResponse, error)
}

// CapacityConfig configures capacity publishing.
type CapacityConfig struct {
	// DriverName is the CSI driver.
	DriverName string
	// Namespace holds the CSIStorageCapacity objects.
	Namespace string
	// PollInterval refreshes every object; default 1m.
	PollInterval time.Duration
	// Owner, when set, becomes the objects' owner (the provisioner's
	// Deployment), so they go away with it.
	Owner *metav1.OwnerReference
	// Timeout bounds each GetCapacity call; default 10s.
	Timeout time.Duration
	// ManagedBy is the csi.storage.k8s.io/managed-by label of the objects
	// this publisher owns. Default ManagedBy(""), external-provisioner's
	// value, so that each of the two sidecars adopts the other's objects; a
	// node deployment's instance has its own (ManagedBy(node)).
	ManagedBy string
	// PreviousManagedBy lists other managed-by values whose objects this
	// publisher adopts (relabels with ManagedBy and updates in place, or
	// deletes when obsolete or duplicate): those earlier releases gave
	// their objects (LegacyManagedBy). Default, with ManagedBy unset too:
	// LegacyManagedBy("").
	PreviousManagedBy []string
}

// legacyManagedByBase is the managed-by value of the central provisioner's
// capacity objects before it took external-provisioner's.
const legacyManagedByBase = "csi-topology-provisioner"

// LegacyManagedBy returns the csi.storage.k8s.io/managed-by value that
// earlier releases gave the capacity objects of a node's instance ("" for
// the central provisioner): csi-topology-provisioner[-<node>], a hash of
// the node name when too long. The publisher adopts such objects.
func LegacyManagedBy(node string) string {
	if node == "" {
		return legacyManagedByBase
	}
	v := legacyManagedByBase + "-" + node
	if len(v) <= validation.LabelValueMaxLength {
		return v
	}
	sum := sha256.Sum256([]byte(node))
	return legacyManagedByBase + "-" + hex.EncodeToString(sum[:])[:validation.LabelValueMaxLength-len(legacyManagedByBase)-1]
}

func (c CapacityConfig) withDefaults() CapacityConfig {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ManagedBy == "" {
		c.ManagedBy = ManagedBy("")
		if c.PreviousManagedBy == nil {
			c.PreviousManagedBy = []string{LegacyManagedBy("")}
		}
	}
	return c
}

// selector selects the objects this publisher owns or adopts: the driver's,
// managed by ManagedBy or one of PreviousManagedBy.
func (c CapacityConfig) selector() labels.Selector {
	driver, err := labels.NewRequirement(labelDriverName, labelselection.Equals, []string{c.DriverName})
	if err != nil {
		// Only an invalid driver name gets here, which the driver's
		// registration has refused already: select nothing.
		return labels.Nothing()
	}
	managedBy, err := labels.NewRequirement(labelManagedBy, labelselection.In, append([]string{c.ManagedBy}, c.PreviousManagedBy...))
	if err != nil {
		return labels.Nothing()
	}
	return labels.NewSelector().Add(*driver, *managedBy)
}

// CapacityPublisher keeps one CSIStorageCapacity per (segment, delayed-binding
// class of the driver), from GetCapacity with the segment and the class's
// parameters: refreshed every PollInterval, and at once for a segment a
// provision or delete touched (Touch). Its client should have its own rate
// limits. Safe for concurrent use.
type CapacityPublisher struct {
	cfg        CapacityConfig
	client     kubernetes.Interface
	csi        CapacityClient
	index      *topology.Index
	classes    storagelisters.StorageClassLister
	capacities storagelisters.CSIStorageCapacityLister
	// pending holds the segments touched since the last refresh; wake
	// tells Run there are some (one signal stands for any number).
	pendingMu sync.Mutex
	pending   map[string]bool
	wake      chan struct{}
	// resync asks for a full sync (a class came or went); one pending
	// request stands for any number.
	resync chan struct{}
	// objects holds an *objectRefresh per object name; asks numbers the
	// refresh requests (see syncOne).
	objects sync.Map
	asks    atomic.Uint64
	metrics *Metrics
}

// NewCapacityPublisher returns a CapacityPublisher; capacities lists the
// CSIStorageCapacity objects (an informer's lister).
func NewCapacityPublisher(cfg CapacityConfig, client kubernetes.Interface, csiClient CapacityClient, index *topology.Index,
	classes storagelisters.StorageClassLister, capacities storagelisters.CSIStorageCapacityLister) *CapacityPublisher {
	cfg = cfg.withDefaults()
	return &CapacityPublisher{cfg: cfg, client: client, csi: csiClient, index: index, classes: classes,
		capacities: capacities, pending: map[string]bool{}, wake: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
}

// Touch asks for the segments of a volume's accessible topology to be
// refreshed soon; it never blocks and never drops a segment: touches made
// before Run gets to them collapse into one refresh per segment.
func (p *CapacityPublisher) Touch(topologies []*csi.Topology) {
	for _, t := range topologies {
		p.TouchSegment(topology.Segment(t.GetSegments()).String())
	}
}

// TouchSegment asks for one segment's objects to be made or refreshed soon
// (a segment appeared, or a volume in it was deleted); it never blocks.
func (p *CapacityPublisher) TouchSegment(segment string) {
	p.pendingMu.Lock()
	p.pending[segment] = true
	p.pendingMu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // Run has a wake-up pending and will see this segment too
	}
}

// takePending returns the touched segments, sorted, and forgets them.
func (p *CapacityPublisher) takePending() []string {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	out := make([]string, 0, len(p.pending))
	for seg := range p.pending {
		out = append(out, seg)
	}
	clear(p.pending)
	sort.Strings(out)
	return out
}

// TouchAll asks for a full sync soon (a class of the driver came, changed or
// went); it never blocks, and requests made before the sync runs collapse.
func (p *CapacityPublisher) TouchAll() {
	select {
	case p.resync <- struct{}{}:
	default:
	}
}

// Refresh updates the objects of the segments of a volume's accessible
// topology now, before the caller goes on: after a provision, so that the
// capacity a scheduler reads already counts the volume by the time the claim
// binds. It returns, for the objects of class it refreshed, "namespace/name"
// → resourceVersion after the refresh (for topology.AnnCapacityVersions).
func (p *CapacityPublisher) Refresh(ctx context.Context, topologies []*csi.Topology, class string) (map[string]string, error) {
	versions := map[string]string{}
	for _, t := range topologies {
		objs, err := p.sync(ctx, topology.Segment(t.GetSegments()).String())
		for _, o := range objs {
			if o.StorageClassName == class {
				versions[o.Namespace+"/"+o.Name] = o.ResourceVersion
			}
		}
		if err != nil {
			return versions, err
		}
	}
	return versions, nil
}

// Run syncs every object now, then every PollInterval and on TouchAll, and
// refreshes touched segments alone as they come, until ctx is done.
func (p *CapacityPublisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(p.cfg.PollInterval)
	defer ticker.Stop()
	full := true
	for {
		if full {
			if err := p.Sync(ctx, ""); err != nil {
				logger.Error(err, "Publishing storage capacity")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			full = true
		case <-p.resync:
			full = true
		case <-p.wake:
			full = false
			for _, seg := range p.takePending() {
				if err := p.Sync(ctx, seg); err != nil {
					logger.Error(err, "Refreshing storage capacity", "segment", seg)
				}
			}
		}
	}
}

type capacityKey struct{ segment, class string }

// Sync brings the objects in line with the known segments and classes; with
// only set, it refreshes that segment's objects only (and deletes nothing).
func (p *CapacityPublisher) Sync(ctx context.Context, only string) error {
	_, err := p.sync(ctx, only)
	return err
}

// sync is Sync that also returns the objects as they are after it.
func (p *CapacityPublisher) sync(ctx context.Context, only string) ([]*storagev1.CSIStorageCapacity, error) {
	desired := map[capacityKey]struct {
		seg   topology.Segment
		class *storagev1.StorageClass
	}{}
	classes, err := p.classes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, keys := range p.index.KeySets() {
		for _, seg := range p.index.Segments(keys) {
			if only != "" && seg.String() != only {
				continue
			}
			for _, c := range classes {
				if c.Provisioner != p.cfg.DriverName || c.VolumeBindingMode == nil || *c.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
					continue
				}
				desired[capacityKey{seg.String(), c.Name}] = struct {
					seg   topology.Segment
					class *storagev1.StorageClass
				}{seg, c}
			}
		}
	}
	have, err := p.existing(ctx, func(k capacityKey) bool { _, ok := desired[k]; return ok }, only == "")
	if err != nil {
		return nil, err
	}
	keys := make([]capacityKey, 0, len(desired))
	for k := range desired {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].segment+keys[i].class < keys[j].segment+keys[j].class })
	var firstErr error
	out := make([]*storagev1.CSIStorageCapacity, 0, len(keys))
	for _, k := range keys {
		d := desired[k]
		obj, err := p.syncOne(ctx, d.seg, d.class, have[k])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	if only == "" {
		p.metrics.setCapacityObjects(len(out))
	}
	return out, firstErr
}

// existing returns the object to keep up to date per (segment, class) among
// the ones the publisher owns or adopts (its own, external-provisioner's,
// and those with a previous managed-by value of its own). With prune it
// deletes the objects of a (segment, class) that is not wanted, and the
// duplicates of one that is, which appear when two sidecars created one
// each (a swap in either direction, or an upgrade from a previous label).
func (p *CapacityPublisher) existing(ctx context.Context, wanted func(capacityKey) bool, prune bool) (map[capacityKey]*storagev1.CSIStorageCapacity, error) {
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
func (p *CapacityPublisher) preferred(a, b *storagev1.CSIStorageCapacity) bool {
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
func (p *CapacityPublisher) deleteObject(ctx context.Context, obj *storagev1.CSIStorageCapacity) error {
	err := p.client.StorageV1().CSIStorageCapacities(p.cfg.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{})
	p.metrics.observeCapacityWrite("delete", err)
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
// capacity client's rate limit. The object last written is kept, so an
// update does not start from an informer copy that has not seen our own
// last write yet.
func (p *CapacityPublisher) syncOne(ctx context.Context, seg topology.Segment, class *storagev1.StorageClass, cur *storagev1.CSIStorageCapacity) (*storagev1.CSIStorageCapacity, error) {
	params, err := parseClassParameters(class.Parameters)
	if err != nil {
		return nil, fmt.Errorf("class %s: %w", class.Name, err)
	}
	csc := p.client.StorageV1().CSIStorageCapacities(p.cfg.Namespace)
	name := capacityName(p.cfg.DriverName, seg.String(), class.Name)
	asked := p.asks.Add(1)
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
	st.started = p.asks.Add(1)
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
func (p *CapacityPublisher) write(ctx context.Context, csc storagev1client.CSIStorageCapacityInterface, name string, seg topology.Segment,
	class *storagev1.StorageClass, params classParameters, cur *storagev1.CSIStorageCapacity) (*storagev1.CSIStorageCapacity, error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.csi.GetCapacity(cctx, &csi.GetCapacityRequest{
		Parameters:         params.driver,
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
		p.metrics.observeCapacityWrite("create", err)
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
	p.metrics.observeCapacityWrite("update", err)
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
		p.metrics.observeCapacityWrite("update", err)
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
func (p *CapacityPublisher) adopt(obj *storagev1.CSIStorageCapacity) bool {
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
