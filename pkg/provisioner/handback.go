package provisioner

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxRepeatedHandBacks bounds the claims whose last hand-back is
// remembered; past it the memory starts again (the next message of a claim
// may then miss that it is a repeat).
const maxRepeatedHandBacks = 10000

// repeatedHandBacks remembers, by claim, the node of the last hand-back for
// an unreachable data source and how many times in a row the scheduler
// chose that node, so that a repeat says so plainly: the pod's scheduler
// does not know the source's reach (a stock kube-scheduler without our
// plugin or extender, or one that does not read snapshots), and the same
// message would otherwise be repeated for ever. Safe for concurrent use.
type repeatedHandBacks struct {
	mu     sync.Mutex
	claims map[types.UID]handBack
}

type handBack struct {
	node  string
	times int
}

// sourceUnreachable records a SourceUnreachable hand-back of claim from its
// selected node and returns err, reworded when the scheduler chose the same
// node again.
func (r *repeatedHandBacks) sourceUnreachable(claim *v1.PersistentVolumeClaim, err error) error {
	node := claim.Annotations[annSelectedNode]
	r.mu.Lock()
	if r.claims == nil || len(r.claims) >= maxRepeatedHandBacks {
		r.claims = map[types.UID]handBack{}
	}
	h := r.claims[claim.UID]
	if h.node != node {
		h = handBack{node: node}
	}
	h.times++
	r.claims[claim.UID] = h
	r.mu.Unlock()
	if h.times < 2 {
		return err
	}
	return fmt.Errorf("the scheduler chose %s again (%s time in a row); the pod's scheduler does not know the source's reach: run csi-topology-scheduler or csi-scheduler-extender for this pod (with read access to volumesnapshots for a restore), or give the pod a node affinity within the source's reach: %w",
		node, ordinal(h.times), err)
}

// forget drops a claim that was provisioned.
func (r *repeatedHandBacks) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.claims, uid)
}

// ordinal spells n as "2nd", "3rd", "11th", "21st".
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
