package provisioner

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/informercache"
)

// replayInformer is the informer the library's controller is given: it
// remembers the handlers added through it, so that replay can hand them
// the cached objects again at once, like a resync of those objects alone.
// Handlers added to the wrapped informer directly are not replayed to.
// Safe for concurrent use.
//
// Why: a claim whose CreateVolume failed while the driver was away waits in
// the library's queue for its exponential backoff (up to
// --retry-interval-max); replaying it when the driver is back retries it
// now. The library's handlers only enqueue, so an extra update is harmless.
type replayInformer struct {
	cache.SharedIndexInformer
	// wanted selects the objects worth replaying.
	wanted func(obj any) bool
	// scope, when set, is the only objects the handlers added through the
	// informer see (node deployment: this node's claims or volumes).
	scope func(obj any) bool

	// keep, when set, gates the library's own writes to the store (see
	// GetStore): an object it rejects is removed instead of written.
	keep func(obj any) bool
	// sent, when set (holdSentAside), holds the library's writes without a
	// resourceVersion (see GetStore).
	sent *informercache.SentObjects

	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
}

// GetStore returns the informer's store as the library writes it: with
// holdSentAside, an object without a resourceVersion is held aside
// (SentObjects); the library's other writes are gated by keep when it is
// set.
//
// Why aside: after creating a PV the library adds the PV it sent, which
// has no resourceVersion, UID or creationTimestamp, to the store, so that
// it sees the PV before the watch brings it. Written into the shared
// store, that copy would replace the watch's when the watch was first,
// until the PV's next event: bind-through's binder and the in-flight
// record's keeper would see a PV the API never returned, and a write from
// it, without a resourceVersion, is applied unconditionally. Held aside,
// the library alone reads it back, until the informer holds the PV.
//
// Why keep: after a reschedule the library writes its copy of the claim
// (with the old labels and resourceVersion) into the store. With node
// deployment's selection by label, the hand-back has just taken the claim
// out of the node's selection; when the watch's delete has already been
// applied, that write would bring the claim back into a store that no
// later event will ever correct.
func (i *replayInformer) GetStore() cache.Store {
	store := i.SharedIndexInformer.GetStore()
	if i.keep == nil && i.sent == nil {
		return store
	}
	return &gatedStore{Store: store, keep: i.keep, sent: i.sent}
}

// gatedStore is a store whose Add and Update hold an object without a
// resourceVersion aside in sent (when set), write only what keep (when
// set) accepts, and delete the rest. Get and GetByKey return the
// informer's copy, or the one held aside when the informer holds none.
type gatedStore struct {
	cache.Store
	keep func(obj any) bool
	sent *informercache.SentObjects
}

func (s *gatedStore) Add(obj any) error { return s.Update(obj) }

func (s *gatedStore) Update(obj any) error {
	if m, err := meta.Accessor(obj); s.sent != nil && err == nil && m.GetResourceVersion() == "" {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			return err
		}
		if _, held, err := s.Store.GetByKey(key); err != nil || held {
			return err
		}
		s.sent.Hold(key, obj)
		return nil
	}
	if s.keep == nil || s.keep(obj) {
		return s.Store.Update(obj)
	}
	return s.Store.Delete(obj)
}

func (s *gatedStore) Get(obj any) (any, bool, error) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return s.GetByKey(key)
}

func (s *gatedStore) GetByKey(key string) (any, bool, error) {
	obj, held, err := s.Store.GetByKey(key)
	if err != nil || held || s.sent == nil {
		return obj, held, err
	}
	obj, held = s.sent.Get(key)
	return obj, held, nil
}

func newReplayInformer(inf cache.SharedIndexInformer, wanted func(obj any) bool) *replayInformer {
	return &replayInformer{SharedIndexInformer: inf, wanted: wanted}
}

// holdSentAside holds the library's writes without a resourceVersion aside
// (see GetStore), through a handler added to the informer, which lets go
// of them once the informer has their events.
func (i *replayInformer) holdSentAside() error {
	sent := informercache.NewSentObjects()
	if _, err := i.SharedIndexInformer.AddEventHandler(sent.Handler()); err != nil {
		return err
	}
	i.sent = sent
	return nil
}

// remember keeps h for replay and returns the handler to register: h
// itself, or h limited to the scope.
func (i *replayInformer) remember(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	if i.scope != nil {
		h = scoped(h, i.scope)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers = append(i.handlers, h)
	return h
}

// AddEventHandler adds h to the informer and remembers it.
func (i *replayInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(i.remember(h))
}

// AddEventHandlerWithResyncPeriod adds h to the informer and remembers it.
func (i *replayInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, period time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(i.remember(h), period)
}

// AddEventHandlerWithOptions adds h to the informer and remembers it.
func (i *replayInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(i.remember(h), o)
}

// replay hands every wanted cached object to the remembered handlers as an
// update without change, and returns how many objects it replayed.
func (i *replayInformer) replay() int {
	handlers := i.remembered()
	n := 0
	for _, obj := range i.GetStore().List() {
		if !i.wanted(obj) || (i.scope != nil && !i.scope(obj)) {
			continue
		}
		n++
		for _, h := range handlers {
			h.OnUpdate(obj, obj)
		}
	}
	return n
}

// replayKey replays the cached object of key, if it is wanted, and
// reports whether it did.
func (i *replayInformer) replayKey(key string) bool {
	obj, ok, err := i.GetStore().GetByKey(key)
	if err != nil || !ok || !i.wanted(obj) || (i.scope != nil && !i.scope(obj)) {
		return false
	}
	for _, h := range i.remembered() {
		h.OnUpdate(obj, obj)
	}
	return true
}

// remembered returns a copy of the handlers added through the informer.
func (i *replayInformer) remembered() []cache.ResourceEventHandler {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]cache.ResourceEventHandler(nil), i.handlers...)
}

// pendingClaim: a claim without a volume yet, not being deleted.
func pendingClaim(obj any) bool {
	c, ok := obj.(*v1.PersistentVolumeClaim)
	return ok && c.Spec.VolumeName == "" && c.DeletionTimestamp == nil
}

// volumeToDelete: a PV the library may have to delete (released, failed,
// or being deleted).
func volumeToDelete(obj any) bool {
	pv, ok := obj.(*v1.PersistentVolume)
	return ok && (pv.Status.Phase == v1.VolumeReleased || pv.Status.Phase == v1.VolumeFailed || pv.DeletionTimestamp != nil)
}

// scoped wraps the handlers given to the library so that it sees only the
// objects in scope: an update that moves an object out of scope reaches it
// as a deletion, one that moves it in as an addition.
func scoped(h cache.ResourceEventHandler, inScope func(any) bool) cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{FilterFunc: func(obj any) bool {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		return inScope(obj)
	}, Handler: h}
}
