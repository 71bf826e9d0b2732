package scheduler

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func req(uid, pod, node, segment string, bytes int64) Request {
	return Request{UID: types.UID(uid), Claim: "ns/" + uid, Pod: pod, Node: node, Segment: segment, Class: "fast", Bytes: bytes}
}

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
				r := req(fmt.Sprintf("%d-%d", p, c), pod, "n1", "zone=z1", 1)
				l.Reserve(r)
				l.Reserve(r) // a retried Reserve
				_ = l.Reserved("zone=z1", "fast", nil)
				_ = l.InFlight("n1", nil, nil, nil)
				if p%2 == 1 {
					l.Release(r.UID) // odd pods are unreserved
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
	if got := l.InFlight("n1", nil, nil, nil); got != pods/2*claims {
		t.Errorf("%d in flight on n1, want %d", got, pods/2*claims)
	}
	l.ReleasePod("ns/p0", nil)
	if got := l.Reserved("zone=z1", "fast", []types.UID{"2-0"}); got != int64(pods/2*claims-claims-1) {
		t.Errorf("after releasing p0 and excluding one claim: %d", got)
	}
}

// model is the ledger's specification: a plain list of live entries,
// scanned on every read.
type model struct {
	entries map[types.UID]modelEntry
}

type modelEntry struct {
	Request
	expires time.Time
	volume  string
}

func (m *model) live(now time.Time, settled func(string) bool) []modelEntry {
	var out []modelEntry
	for uid, e := range m.entries {
		if now.After(e.expires) || (e.volume != "" && settled(e.volume)) {
			delete(m.entries, uid)
			continue
		}
		out = append(out, e)
	}
	return out
}

// Random operations give the same sums as the scanning model: the running
// sums, the pod and node indexes, the settling sets and the expiry heap
// stay exact.
func TestLedgerMatchesModel(t *testing.T) {
	now := time.Unix(1000, 0)
	settledVolumes := map[string]bool{}
	settled := func(v string) bool { return settledVolumes[v] }
	l := NewLedger(time.Minute, func() time.Time { return now })
	l.SetSettledCheck(settled)
	m := &model{entries: map[types.UID]modelEntry{}}
	rng := rand.New(rand.NewPCG(1, 2))
	segments, nodes, pods := []string{"s1", "s2"}, []string{"n1", "n2", "n3"}, []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	uid := func() types.UID { return types.UID(fmt.Sprintf("c%d", rng.IntN(12))) }
	for step := 0; step < 5000; step++ {
		switch op := rng.IntN(10); {
		case op < 4:
			r := req(string(uid()), pods[rng.IntN(len(pods))], nodes[rng.IntN(len(nodes))], segments[rng.IntN(len(segments))], int64(1+rng.IntN(100)))
			l.Reserve(r)
			m.entries[r.UID] = modelEntry{Request: r, expires: now.Add(time.Minute)}
		case op < 5:
			u := uid()
			l.Release(u)
			delete(m.entries, u)
		case op < 6:
			pod := pods[rng.IntN(len(pods))]
			keep := func(u types.UID) bool { return u == "c0" }
			l.ReleasePod(pod, keep)
			for u, e := range m.entries {
				if e.Pod == pod && !keep(u) {
					delete(m.entries, u)
				}
			}
		case op < 7:
			u, vol := uid(), fmt.Sprintf("pv%d", rng.IntN(6))
			if settled(vol) {
				delete(m.entries, u)
			} else if e, ok := m.entries[u]; ok {
				e.volume = vol
				m.entries[u] = e
			}
			l.Settle(u, vol)
		case op < 8:
			vol := fmt.Sprintf("pv%d", rng.IntN(6))
			settledVolumes[vol] = !settledVolumes[vol]
		default:
			now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
		}
		own := []types.UID{uid(), uid()}
		if own[0] == own[1] {
			own = own[:1]
		}
		seg, node := segments[rng.IntN(len(segments))], nodes[rng.IntN(len(nodes))]
		pending := map[string]bool{"ns/" + string(uid()): true}
		counted := func(v string) bool { return v == "pv1" }
		// Read the bucket first: it settles entries, as the model's scan does.
		gotBytes := l.Reserved(seg, "fast", own)
		var wantBytes int64
		wantInFlight := 0
		var wantLive []types.UID
		for _, e := range m.live(now, settled) {
			wantLive = append(wantLive, e.UID)
			isOwn := e.UID == own[0] || e.UID == own[len(own)-1]
			if e.Segment == seg && !isOwn {
				wantBytes += e.Bytes
			}
			if e.Node == node && !isOwn && !pending[e.Claim] && (e.volume == "" || !counted(e.volume)) {
				wantInFlight++
			}
		}
		if gotBytes != wantBytes {
			t.Fatalf("step %d: Reserved(%s) = %d, want %d", step, seg, gotBytes, wantBytes)
		}
		// InFlight does not settle; the model dropped settled entries
		// already, and so did Reserved for seg only: settle the other
		// segment too before comparing.
		for _, s := range segments {
			l.Reserved(s, "fast", nil)
		}
		if got := l.InFlight(node, own, pending, counted); got != wantInFlight {
			t.Fatalf("step %d: InFlight(%s) = %d, want %d", step, node, got, wantInFlight)
		}
		if got := l.Len(); got != len(wantLive) {
			t.Fatalf("step %d: Len = %d, want %d", step, got, len(wantLive))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for u, r := range l.claims {
		if l.expiry[r.index] != r {
			t.Errorf("claim %s: heap index %d is stale", u, r.index)
		}
	}
	if diff := cmp.Diff(len(l.claims), len(l.expiry)); diff != "" {
		t.Errorf("heap size (-claims +heap):\n%s", diff)
	}
}

// ReleasePod touches only the pod's entries and honours keep.
func TestLedgerReleasePod(t *testing.T) {
	tests := []struct {
		name string
		keep func(types.UID) bool
		want int
	}{
		{name: "all of the pod", want: 1},
		{name: "keep one", keep: func(u types.UID) bool { return u == "a2" }, want: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(time.Hour, nil)
			l.Reserve(req("a1", "ns/a", "n1", "s", 1))
			l.Reserve(req("a2", "ns/a", "n1", "s", 2))
			l.Reserve(req("b1", "ns/b", "n1", "s", 4))
			l.ReleasePod("ns/a", tc.keep)
			if got := l.Len(); got != tc.want {
				t.Errorf("Len = %d, want %d", got, tc.want)
			}
			l.ReleasePod("ns/none", nil)
			if got := l.Len(); got != tc.want {
				t.Errorf("Len after releasing an unknown pod = %d, want %d", got, tc.want)
			}
		})
	}
}
