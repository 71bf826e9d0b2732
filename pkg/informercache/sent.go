package informercache

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
)

// SentObjects are the objects a controller wrote to an informer's store
// without a resourceVersion (the provisioning library: a PV it has just
// created) while the informer held none of their key, by key; kept out of
// the shared store so that its other readers see only what the API
// returned. One goes once the informer has an event of its key, or after
// sentTTL (the PV was deleted before the watch brought it). Safe for
// concurrent use. Not client-go's MutationCache: its LRU keeps 100 objects,
// so a burst's new PVs would page out before their watch events came.
type SentObjects struct {
	mu   sync.Mutex
	objs map[string]sentObject
	// pruneAt is the size at which Hold next drops expired objects.
	pruneAt int
}

type sentObject struct {
	obj any
	at  time.Time
}

// sentTTL bounds how long an object is held aside for a watch that never
// brings it.
const sentTTL = time.Minute

// minPruneAt: Hold looks for expired objects at this size first, then
// each time the size has doubled since it last looked.
const minPruneAt = 64

// NewSentObjects returns an empty SentObjects; give its Handler to the
// informer.
func NewSentObjects() *SentObjects {
	return &SentObjects{objs: map[string]sentObject{}, pruneAt: minPruneAt}
}

// Hold holds obj, of key, aside.
func (s *SentObjects) Hold(key string, obj any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(s.objs) >= s.pruneAt {
		for k, o := range s.objs {
			if now.Sub(o.at) > sentTTL {
				delete(s.objs, k)
			}
		}
		s.pruneAt = max(minPruneAt, 2*len(s.objs))
	}
	s.objs[key] = sentObject{obj: obj, at: now}
}

// Get returns the object of key held aside.
func (s *SentObjects) Get(key string) (any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok || time.Since(o.at) > sentTTL {
		return nil, false
	}
	return o.obj, true
}

// seen drops the object of obj's key: the informer holds the key, or had
// it deleted.
func (s *SentObjects) seen(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, key)
}

// Len is the number of objects held aside.
func (s *SentObjects) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objs)
}

// Handler lets go of an object held aside once the informer has an event
// of its key.
func (s *SentObjects) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    s.seen,
		UpdateFunc: func(_, obj any) { s.seen(obj) },
		DeleteFunc: s.seen,
	}
}
