package scheduler

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Concurrent Reserve/Unreserve for many pods leave the ledger exact: every
// reservation still held is counted once, released ones not at all.
func TestLedgerConcurrency(t *testing.T) {
	l := NewLedger(time.Hour, nil)
	const pods, claims = 50, 4
	var wg sync.WaitGroup
	for p := 0; p < pods; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := fmt.Sprintf("ns/p%d", p)
			for c := 0; c < claims; c++ {
				uid := types.UID(fmt.Sprintf("%d-%d", p, c))
				l.Reserve(uid, pod, "zone=z1", "fast", 1)
				l.Reserve(uid, pod, "zone=z1", "fast", 1) // a retried Reserve
				_ = l.Reserved("zone=z1", "fast", nil)
				if p%2 == 1 {
					l.Release(uid) // odd pods are unreserved
				}
			}
		}()
	}
	wg.Wait()
	if got, want := l.Reserved("zone=z1", "fast", nil), int64(pods/2*claims); got != want {
		t.Errorf("reserved %d, want %d", got, want)
	}
	if got := l.Len(); got != pods/2*claims {
		t.Errorf("%d reservations, want %d", got, pods/2*claims)
	}
	l.ReleasePod("ns/p0")
	if got := l.Reserved("zone=z1", "fast", func(uid types.UID) bool { return uid == "2-0" }); got != int64(pods/2*claims-claims-1) {
		t.Errorf("after releasing p0 and excluding one claim: %d", got)
	}
}
