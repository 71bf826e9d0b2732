package capacity

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Client is the CSI call capacity publishing needs.
type Client interface {
	GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, opts ...grpc.CallOption) (*csi.GetCapacityResponse, error)
}

// Publisher keeps one CSIStorageCapacity per (segment, delayed-binding
// class of the driver), from GetCapacity with the segment and the class's
// parameters: refreshed every PollInterval, and at once for a segment a
// provision or delete touched (Touch). Its client should have its own rate
// limits. Safe for concurrent use.
type Publisher struct {
	cfg        Config
	client     kubernetes.Interface
	csi        Client
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
	// metrics records the writes (SetMetrics); nil records nothing.
	metrics *Metrics
}

// NewPublisher returns a Publisher; capacities lists the
// CSIStorageCapacity objects (an informer's lister).
func NewPublisher(cfg Config, client kubernetes.Interface, csiClient Client, index *topology.Index,
	classes storagelisters.StorageClassLister, capacities storagelisters.CSIStorageCapacityLister) *Publisher {
	cfg = cfg.withDefaults()
	return &Publisher{cfg: cfg, client: client, csi: csiClient, index: index, classes: classes,
		capacities: capacities, pending: map[string]bool{}, wake: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
}

// SetMetrics makes the publisher record its objects and writes in m (nil:
// nowhere). Call it before Run and before any other call.
func (p *Publisher) SetMetrics(m *Metrics) { p.metrics = m }

// Touch asks for the segments of a volume's accessible topology to be
// refreshed soon; it never blocks and never drops a segment: touches made
// before Run gets to them collapse into one refresh per segment.
func (p *Publisher) Touch(topologies []*csi.Topology) {
	for _, t := range topologies {
		p.TouchSegment(topology.Segment(t.GetSegments()).String())
	}
}

// TouchSegment asks for one segment's objects to be made or refreshed soon
// (a segment appeared, or a volume in it was deleted); it never blocks.
func (p *Publisher) TouchSegment(segment string) {
	p.pendingMu.Lock()
	p.pending[segment] = true
	p.pendingMu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // Run has a wake-up pending and will see this segment too
	}
}

// takePending returns the touched segments, sorted, and forgets them.
func (p *Publisher) takePending() []string {
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
func (p *Publisher) TouchAll() {
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
func (p *Publisher) Refresh(ctx context.Context, topologies []*csi.Topology, class string) (map[string]string, error) {
	asked := p.newAsk() // the volume exists: any GetCapacity from now on counts it
	versions := map[string]string{}
	for _, t := range topologies {
		objs, err := p.sync(ctx, topology.Segment(t.GetSegments()).String(), asked)
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
func (p *Publisher) Run(ctx context.Context) {
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
func (p *Publisher) Sync(ctx context.Context, only string) error {
	_, err := p.sync(ctx, only, p.newAsk())
	return err
}

// newAsk numbers a refresh as it is asked for (see syncOne).
func (p *Publisher) newAsk() uint64 { return p.asks.Add(1) }

// sync is Sync that also returns the objects as they are after it; asked
// is the refresh's number (newAsk).
func (p *Publisher) sync(ctx context.Context, only string, asked uint64) ([]*storagev1.CSIStorageCapacity, error) {
	desired := map[capacityKey]struct {
		seg   topology.Segment
		class *storagev1.StorageClass
	}{}
	classes, err := p.classes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	known := false
	for _, keys := range p.index.KeySets() {
		for _, seg := range p.index.Segments(keys) {
			known = true
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
	// With no segment known, nothing is pruned: that is what the topology
	// looks like while the driver is between two registrations (kubelet
	// removes the driver's CSINode entry when its registration socket goes,
	// e.g. during a rolling restart of the node DaemonSet, and a node
	// deployment's instance sees only its own node), not a cluster the
	// driver left. Objects of a segment no node has are harmless.
	prune := only == "" && known
	if only == "" && !known {
		klog.FromContext(ctx).V(2).Info("No topology segment of the driver known: keeping the capacity objects until one is")
	}
	have, err := p.existing(ctx, func(k capacityKey) bool { _, ok := desired[k]; return ok }, prune)
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
		obj, err := p.syncOne(ctx, d.seg, d.class, have[k], asked)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	if only == "" {
		p.metrics.SetObjects(len(out))
	}
	return out, firstErr
}

// ClassEventHandler returns the StorageClass informer handler that asks for
// a full sync (TouchAll) when a class of the publisher's driver is added,
// changed or deleted, so that a new class gets its objects at once, not at
// the next poll.
func (p *Publisher) ClassEventHandler() cache.ResourceEventHandler {
	return classHandler(p.cfg.DriverName, p.TouchAll)
}

// classHandler calls resync when a class of driver is added, changed or
// deleted.
func classHandler(driver string, resync func()) cache.ResourceEventHandler {
	ours := func(obj any) bool {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		c, ok := obj.(*storagev1.StorageClass)
		return ok && c.Provisioner == driver
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ours(obj) {
				resync()
			}
		},
		UpdateFunc: func(old, obj any) {
			if ours(old) || ours(obj) {
				resync()
			}
		},
		DeleteFunc: func(obj any) {
			if ours(obj) {
				resync()
			}
		},
	}
}
