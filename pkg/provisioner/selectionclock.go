package provisioner

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SelectionClock remembers when the provisioner first saw each claim's
// selected-node annotation (fed by the claim informer), for the
// selected_node_to_pv_seconds metric. Safe for concurrent use.
type SelectionClock struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[types.UID]selection
}

type selection struct {
	node string
	at   time.Time
}

// NewSelectionClock returns an empty clock; now may be nil (time.Now).
func NewSelectionClock(now func() time.Time) *SelectionClock {
	if now == nil {
		now = time.Now
	}
	return &SelectionClock{now: now, m: map[types.UID]selection{}}
}

// Observe records a claim event: an unbound claim with a selected node
// starts the clock for that node (once); any other state stops it.
func (c *SelectionClock) Observe(claim *v1.PersistentVolumeClaim) {
	node := claim.Annotations[annSelectedNode]
	c.mu.Lock()
	defer c.mu.Unlock()
	if node == "" || claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil {
		delete(c.m, claim.UID)
		return
	}
	if s, ok := c.m[claim.UID]; !ok || s.node != node {
		c.m[claim.UID] = selection{node: node, at: c.now()}
	}
}

// Forget drops a deleted claim.
func (c *SelectionClock) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// Since returns how long ago node was first seen selected for the claim.
func (c *SelectionClock) Since(uid types.UID, node string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[uid]
	if !ok || s.node != node {
		return 0, false
	}
	return c.now().Sub(s.at), true
}

// Len returns the number of claims being timed.
func (c *SelectionClock) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
