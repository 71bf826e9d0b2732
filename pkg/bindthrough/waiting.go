package bindthrough

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// maxStale bounds the stale versions remembered per object of a pair.
const maxStale = 8

// staleVersions remembers, by claim UID, the versions of a claim and of its
// PV that the API has replaced but the informers may still show: the ones
// a write of the binder replaced, or found replaced (a conflict). A sync
// that reads one of them from the informers writes nothing and waits for
// the object's next event, instead of sending a write bound to conflict.
// It also holds the PVs whose claim the claims' informer does not hold
// yet. An entry goes once the informers show neither object at a stale
// version. Safe for concurrent use.
type staleVersions struct {
	mu      sync.Mutex
	byClaim map[types.UID]*pairVersions
}

// pairVersions are the stale versions of one claim and its PV.
type pairVersions struct {
	pv          string
	pvs, claims []string
}

func newStaleVersions() *staleVersions {
	return &staleVersions{byClaim: map[types.UID]*pairVersions{}}
}

// entry returns claim's entry for pv, made if missing. s.mu is held.
func (s *staleVersions) entry(claim types.UID, pv string) *pairVersions {
	e := s.byClaim[claim]
	if e == nil || e.pv != pv {
		e = &pairVersions{pv: pv}
		s.byClaim[claim] = e
	}
	return e
}

// await makes pv wait for claim's next event.
func (s *staleVersions) await(claim types.UID, pv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(claim, pv)
}

// note remembers pvVersion and claimVersion ("": none) as stale.
func (s *staleVersions) note(claim types.UID, pv, pvVersion, claimVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(claim, pv)
	add := func(list []string, v string) []string {
		if v == "" || slices.Contains(list, v) {
			return list
		}
		return append(list[max(0, len(list)-maxStale+1):], v)
	}
	e.pvs, e.claims = add(e.pvs, pvVersion), add(e.claims, claimVersion)
}

// holds reports whether pvVersion or claimVersion ("": not asked) is
// stale; when neither is, and both were asked, the informers have caught
// up and the entry goes.
func (s *staleVersions) holds(claim types.UID, pvVersion, claimVersion string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byClaim[claim]
	if e == nil {
		return false
	}
	if slices.Contains(e.pvs, pvVersion) || slices.Contains(e.claims, claimVersion) {
		return true
	}
	if pvVersion != "" && claimVersion != "" {
		delete(s.byClaim, claim)
	}
	return false
}

// waiter is the PV of an entry whose claim is at a version not stale: the
// PV to queue on this event of the claim; "" for none.
func (s *staleVersions) waiter(claim types.UID, claimVersion string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byClaim[claim]
	if e == nil || slices.Contains(e.claims, claimVersion) {
		return ""
	}
	return e.pv
}

// forget drops claim's entry (of pv, when pv is not "").
func (s *staleVersions) forget(claim types.UID, pv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byClaim[claim]; e != nil && (pv == "" || e.pv == pv) {
		delete(s.byClaim, claim)
	}
}

// size is the number of entries.
func (s *staleVersions) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byClaim)
}

// claimChanged queues the PV that waits for this version of the claim.
func (b *Binder) claimChanged(obj any) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if pv := b.stale.waiter(claim.UID, claim.ResourceVersion); pv != "" {
		b.queue.Add(pv)
	}
}

// claimDeleted forgets the claim's entry.
func (b *Binder) claimDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if claim, ok := obj.(*v1.PersistentVolumeClaim); ok {
		b.stale.forget(claim.UID, "")
	}
}

// volumeDeleted forgets the entry of the PV's claim.
func (b *Binder) volumeDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pv, ok := obj.(*v1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
		b.stale.forget(pv.Spec.ClaimRef.UID, pv.Name)
	}
}
