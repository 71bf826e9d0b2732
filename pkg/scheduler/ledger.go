package scheduler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Ledger records storage reserved in a (segment, class) for claims that
// have a node but no volume yet: pods reserved by the scheduler and not yet
// annotated, and claims with selected-node set but not yet bound. An entry
// ends when its claim is released (annotation removed, pod deleted), when
// it expires, or, once the claim is bound (Settle), as soon as the
// published capacity counts the volume (the settled check). Safe for concurrent use; Reserve and Release of the
// same claim are idempotent, so Reserve/Unreserve stay exact when calls for
// one pod race.
type Ledger struct {
	ttl     time.Duration
	now     func() time.Time
	settled func(volume string) bool

	mu      sync.Mutex
	claims  map[types.UID]reservation
	buckets map[bucket]map[types.UID]bool
}

type bucket struct{ segment, class string }

type reservation struct {
	bucket  bucket
	pod     string
	bytes   int64
	expires time.Time
	// volume is set once the claim is bound: the reservation lasts until
	// settled(volume).
	volume string
}

// NewLedger returns a Ledger whose entries expire after ttl; now may be nil
// (time.Now).
func NewLedger(ttl time.Duration, now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{ttl: ttl, now: now, claims: map[types.UID]reservation{}, buckets: map[bucket]map[types.UID]bool{}}
}

// SetSettledCheck sets how the ledger learns that the published capacity
// counts a bound claim's volume; without it Settle releases at once. Call
// before use.
func (l *Ledger) SetSettledCheck(settled func(volume string) bool) { l.settled = settled }

// Settle records that a reserved claim is bound to volume: its reservation
// ends once the settled check says the published capacity counts the
// volume (checked when the bucket is read), or when it expires.
func (l *Ledger) Settle(claim types.UID, volume string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.claims[claim]
	if !ok {
		return
	}
	if l.settled == nil || l.settled(volume) {
		l.releaseLocked(claim)
		return
	}
	r.volume = volume
	l.claims[claim] = r
}

// Reserve records bytes for a claim of pod in (segment, class), replacing
// an earlier reservation of the claim.
func (l *Ledger) Reserve(claim types.UID, pod, segment, class string, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(claim)
	b := bucket{segment, class}
	l.claims[claim] = reservation{bucket: b, pod: pod, bytes: bytes, expires: l.now().Add(l.ttl)}
	if l.buckets[b] == nil {
		l.buckets[b] = map[types.UID]bool{}
	}
	l.buckets[b][claim] = true
}

// Release ends a claim's reservation, if any.
func (l *Ledger) Release(claim types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(claim)
}

// ReleasePod ends every reservation of a pod.
func (l *Ledger) ReleasePod(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, r := range l.claims {
		if r.pod == pod {
			l.releaseLocked(uid)
		}
	}
}

func (l *Ledger) releaseLocked(claim types.UID) {
	r, ok := l.claims[claim]
	if !ok {
		return
	}
	delete(l.claims, claim)
	delete(l.buckets[r.bucket], claim)
	if len(l.buckets[r.bucket]) == 0 {
		delete(l.buckets, r.bucket)
	}
}

// Reserved returns the bytes reserved in (segment, class) for claims other
// than those except reports (a pod's own claims). Expired and settled
// entries are dropped. Cost: the reservations in flight in that bucket.
func (l *Ledger) Reserved(segment, class string, except func(types.UID) bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var sum int64
	for uid := range l.buckets[bucket{segment, class}] {
		r := l.claims[uid]
		if now.After(r.expires) || (r.volume != "" && l.settled(r.volume)) {
			l.releaseLocked(uid)
			continue
		}
		if except == nil || !except(uid) {
			sum += r.bytes
		}
	}
	return sum
}

// Len returns the number of live reservations.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.claims)
}
