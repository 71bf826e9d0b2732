package scheduler

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Ledger records storage reserved in a (segment, class) on a node for claims
// that have a node but no volume yet: pods reserved by the scheduler and not
// yet annotated, and claims with selected-node set but not yet bound. An
// entry ends when its claim is released (annotation removed, claim or pod
// deleted), when it expires, or, once the claim is bound (Settle), as soon
// as the published capacity counts the volume (the settled check).
//
// Safe for concurrent use; every method holds one lock, so sums are exact
// under concurrency. Reserve and Release of the same claim are idempotent,
// so Reserve/Unreserve stay exact when calls for one pod race. The ledger
// keeps a running byte sum per bucket and indexes entries by pod and by
// node, so reads cost the pod's claims plus the bucket's settling entries,
// never the reservations in flight; expiry is a heap checked on each read.
type Ledger struct {
	ttl     time.Duration
	now     func() time.Time
	settled func(volume string) bool

	mu      sync.Mutex
	claims  map[types.UID]*reservation
	pods    map[string]map[types.UID]struct{}
	buckets map[bucket]*bucketState
	nodes   map[string]*nodeState
	expiry  expiryHeap
}

// Request is one claim's reservation.
type Request struct {
	// UID identifies the claim.
	UID types.UID
	// Claim is the claim's "namespace/name".
	Claim string
	// Pod is the "namespace/name" of the pod that reserved it (or the
	// claim's own key for a reservation observed from its annotation).
	Pod string
	// Node is the node the claim goes to.
	Node string
	// Segment and Class name the bucket: the node's segment for the driver
	// (topology.Segment.String) and the claim's storage class.
	Segment, Class string
	// Bytes is the claim's request.
	Bytes int64
}

type bucket struct{ segment, class string }

// bucketState sums a bucket's live entries; settling holds the entries
// whose claim is bound and whose capacity has not been seen yet.
type bucketState struct {
	bytes    int64
	n        int
	settling map[types.UID]struct{}
}

// nodeState counts a node's live entries by claim key; settling as in
// bucketState.
type nodeState struct {
	n        int
	keys     map[string]int
	settling map[types.UID]struct{}
}

type reservation struct {
	Request
	expires time.Time
	// volume is set once the claim is bound: the reservation lasts until
	// settled(volume).
	volume string
	// index is the entry's position in the expiry heap.
	index int
}

// NewLedger returns a Ledger whose entries expire after ttl; now may be nil
// (time.Now).
func NewLedger(ttl time.Duration, now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{
		ttl: ttl, now: now,
		claims:  map[types.UID]*reservation{},
		pods:    map[string]map[types.UID]struct{}{},
		buckets: map[bucket]*bucketState{},
		nodes:   map[string]*nodeState{},
	}
}

// SetSettledCheck sets how the ledger learns that the published capacity
// counts a bound claim's volume; without it Settle releases at once. The
// check runs under the ledger's lock and must not call the ledger. Call
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
	l.buckets[r.bucket()].settling[claim] = struct{}{}
	if ns := l.nodes[r.Node]; ns != nil {
		ns.settling[claim] = struct{}{}
	}
}

// Reserve records a claim's request, replacing an earlier reservation of
// the claim.
func (l *Ledger) Reserve(req Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(req.UID)
	r := &reservation{Request: req, expires: l.now().Add(l.ttl)}
	l.claims[req.UID] = r
	if l.pods[req.Pod] == nil {
		l.pods[req.Pod] = map[types.UID]struct{}{}
	}
	l.pods[req.Pod][req.UID] = struct{}{}
	b := l.buckets[r.bucket()]
	if b == nil {
		b = &bucketState{settling: map[types.UID]struct{}{}}
		l.buckets[r.bucket()] = b
	}
	b.bytes += req.Bytes
	b.n++
	if req.Node != "" {
		ns := l.nodes[req.Node]
		if ns == nil {
			ns = &nodeState{keys: map[string]int{}, settling: map[types.UID]struct{}{}}
			l.nodes[req.Node] = ns
		}
		ns.n++
		ns.keys[req.Claim]++
	}
	heap.Push(&l.expiry, r)
}

// Release ends a claim's reservation, if any.
func (l *Ledger) Release(claim types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(claim)
}

// ReleaseUnlessOn ends a claim's reservation unless it is on node.
func (l *Ledger) ReleaseUnlessOn(claim types.UID, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.claims[claim]; ok && r.Node != node {
		l.releaseLocked(claim)
	}
}

// ReleasePod ends the reservations pod made, except those of claims keep
// reports (keep may be nil; it runs under the ledger's lock and must not
// call the ledger). Cost: the pod's reservations.
func (l *Ledger) ReleasePod(pod string, keep func(claim types.UID) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid := range l.pods[pod] {
		if keep == nil || !keep(uid) {
			l.releaseLocked(uid)
		}
	}
}

func (r *reservation) bucket() bucket { return bucket{r.Segment, r.Class} }

func (l *Ledger) releaseLocked(claim types.UID) {
	r, ok := l.claims[claim]
	if !ok {
		return
	}
	delete(l.claims, claim)
	heap.Remove(&l.expiry, r.index)
	if set := l.pods[r.Pod]; set != nil {
		delete(set, claim)
		if len(set) == 0 {
			delete(l.pods, r.Pod)
		}
	}
	if b := l.buckets[r.bucket()]; b != nil {
		b.bytes -= r.Bytes
		b.n--
		delete(b.settling, claim)
		if b.n == 0 {
			delete(l.buckets, r.bucket())
		}
	}
	if ns := l.nodes[r.Node]; ns != nil {
		ns.n--
		if ns.keys[r.Claim]--; ns.keys[r.Claim] == 0 {
			delete(ns.keys, r.Claim)
		}
		delete(ns.settling, claim)
		if ns.n == 0 {
			delete(l.nodes, r.Node)
		}
	}
}

// expireLocked ends the entries whose time has passed: amortised
// O(log entries) per entry.
func (l *Ledger) expireLocked() {
	now := l.now()
	for len(l.expiry) > 0 && now.After(l.expiry[0].expires) {
		l.releaseLocked(l.expiry[0].UID)
	}
}

// Reserved returns the bytes reserved in (segment, class) for claims other
// than own (a pod's own claims). Expired entries, and settling ones whose
// capacity is now published, are dropped first. Cost: own plus the
// bucket's settling entries, independent of the reservations in flight.
func (l *Ledger) Reserved(segment, class string, own []types.UID) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	key := bucket{segment, class}
	b := l.buckets[key]
	if b == nil {
		return 0
	}
	for uid := range b.settling {
		if r := l.claims[uid]; l.settled == nil || l.settled(r.volume) {
			l.releaseLocked(uid)
		}
	}
	sum := b.bytes // 0 when the loop above emptied the bucket
	for _, uid := range own {
		if r, ok := l.claims[uid]; ok && r.bucket() == key {
			sum -= r.Bytes
		}
	}
	return sum
}

// InFlight returns how many live reservations on node, other than those of
// own, a count of the node's volumes does not include yet: pending holds
// the claim keys ("namespace/name") that count includes, and counted
// reports whether it includes a bound claim's volume (it runs under the
// ledger's lock and must not call the ledger). Cost: pending, own and the
// node's settling entries, independent of the reservations on the node.
func (l *Ledger) InFlight(node string, own []types.UID, pending map[string]bool, counted func(volume string) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	ns := l.nodes[node]
	if ns == nil {
		return 0
	}
	// included reports whether the count already includes an entry.
	included := func(r *reservation) bool {
		return pending[r.Claim] || (r.volume != "" && counted != nil && counted(r.volume))
	}
	n := ns.n
	for key := range pending {
		n -= ns.keys[key]
	}
	for uid := range ns.settling {
		if r := l.claims[uid]; !pending[r.Claim] && included(r) {
			n--
		}
	}
	for _, uid := range own {
		if r, ok := l.claims[uid]; ok && r.Node == node && !included(r) {
			n--
		}
	}
	return n
}

// Len returns the number of live reservations.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	return len(l.claims)
}

// expiryHeap orders reservations by expiry (container/heap).
type expiryHeap []*reservation

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *expiryHeap) Push(x any) {
	r := x.(*reservation)
	r.index = len(*h)
	*h = append(*h, r)
}

func (h *expiryHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
