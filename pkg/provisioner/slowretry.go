package provisioner

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// SlowRetries is the rate limiter of the library's work queues: the
// exponential per-item backoff it wraps, except that the retry following a
// claim marked with Slow waits at least Max. Safe for concurrent use.
//
// Why: a CreateVolume the driver refused with INVALID_ARGUMENT fails the
// same way until someone changes the claim, its class or the driver, so
// retrying it after 1s, 2s, 4s ... is load without hope. Upstream
// external-provisioner v6.3.0 takes the code for final (ProvisioningFinished)
// and the library retries it with the same exponential backoff as anything
// else. Here the claim is retried at the slow end of that backoff
// (--retry-interval-max) from the first failure on. A change of the claim
// still queues it at once (the library's claim handler adds it without a
// delay), and so does a reconnected driver (Controller.RetryNow).
//
// The library queues claims by UID (and PVs by name, which are never
// marked); a mark is consumed by the When that follows the failure, so the
// marks held are at most the claims being provisioned at this moment.
type SlowRetries struct {
	inner workqueue.RateLimiter
	max   time.Duration

	mu     sync.Mutex
	marked map[string]struct{}
}

var _ workqueue.RateLimiter = &SlowRetries{}

// NewSlowRetries wraps inner; a marked claim's next delay is at least max.
func NewSlowRetries(inner workqueue.RateLimiter, max time.Duration) *SlowRetries {
	return &SlowRetries{inner: inner, max: max, marked: map[string]struct{}{}}
}

// Slow marks a claim: its next retry waits at least Max. Nil-safe.
func (s *SlowRetries) Slow(uid types.UID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marked[string(uid)] = struct{}{}
}

// Unmark removes a claim's mark, if any. Nil-safe.
func (s *SlowRetries) Unmark(uid types.UID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marked, string(uid))
}

// take reports whether item was marked and removes the mark.
func (s *SlowRetries) take(item any) bool {
	key, ok := item.(string)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, marked := s.marked[key]
	delete(s.marked, key)
	return marked
}

// Max is the delay of a marked claim's retry.
func (s *SlowRetries) Max() time.Duration { return s.max }

// When returns the delay before item's next retry: the wrapped backoff's,
// raised to Max when the item was marked.
func (s *SlowRetries) When(item any) time.Duration {
	d := s.inner.When(item)
	if s.take(item) && d < s.max {
		d = s.max
	}
	return d
}

// Forget resets item's backoff and drops its mark.
func (s *SlowRetries) Forget(item any) {
	s.take(item)
	s.inner.Forget(item)
}

// NumRequeues returns how often item failed in a row.
func (s *SlowRetries) NumRequeues(item any) int { return s.inner.NumRequeues(item) }
