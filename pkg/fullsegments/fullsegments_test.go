package fullsegments

import (
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

const (
	zoneKey = driver.TopologyPrefix + "zone"
	rackKey = driver.TopologyPrefix + "rack"
	gi      = int64(1) << 30
)

func zoneTopo(z string) []*csi.Topology {
	return []*csi.Topology{{Segments: map[string]string{zoneKey: z}}}
}

func TestFullSegments(t *testing.T) {
	const hold = time.Minute
	z1r1 := topology.Segment{zoneKey: "z1", rackKey: "r1"}
	z1r2 := topology.Segment{zoneKey: "z1", rackKey: "r2"}
	zone := func(z string) []*csi.Topology { return zoneTopo(z) }
	rack := func(z, r string) []*csi.Topology {
		return []*csi.Topology{{Segments: map[string]string{zoneKey: z, rackKey: r}}}
	}
	type step struct {
		advance time.Duration
		learn   string // class whose mark of seg is learned
		seen    string // class whose mark of seg is cleared by a success
		freed   []*csi.Topology
		seg     topology.Segment // of learn and seen; default z1r1
		wide    bool
		bytes   int64 // size of the volume learnt or seen
	}
	tests := []struct {
		name      string
		steps     []step
		class     string // the class asked about; default "fast"
		seg       topology.Segment
		bytes     int64 // size of the claim asked about
		wantKnown bool
		wantHeld  bool
		wantWide  bool
		wantCount int // marks kept
	}{
		{name: "nothing learned", seg: z1r1},
		{name: "learned: held", steps: []step{{learn: "fast"}}, seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "just before the hold ends: held", steps: []step{{learn: "fast"}, {advance: hold - time.Nanosecond}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "hold passed: known, strict, not held", steps: []step{{learn: "fast"}, {advance: hold}},
			seg: z1r1, wantKnown: true, wantCount: 1},
		{name: "renewed after the hold: held again", steps: []step{{learn: "fast"}, {advance: 2 * hold}, {learn: "fast"}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "learned from a volume in several segments: wide", steps: []step{{learn: "fast", wide: true}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantWide: true, wantCount: 1},
		{name: "renewed by RESOURCE_EXHAUSTED: no longer wide", steps: []step{{learn: "fast", wide: true}, {learn: "fast"}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "another class is not affected", steps: []step{{learn: "fast"}}, class: "slow", seg: z1r1, wantCount: 1},
		{name: "another segment is not affected", steps: []step{{learn: "fast"}}, seg: z1r2, wantCount: 1},
		{name: "a success clears the mark", steps: []step{{learn: "fast"}, {advance: hold}, {seen: "fast"}}, seg: z1r1},
		{name: "a success of another class keeps it", steps: []step{{learn: "fast"}, {seen: "slow"}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a deletion in the segment ends the hold of every class, asks stay strict", steps: []step{{learn: "fast"}, {learn: "slow"}, {freed: rack("z1", "r1")}},
			class: "slow", seg: z1r1, wantKnown: true, wantCount: 2},
		{name: "a deletion reported by zone alone ends the hold of the zone's racks", steps: []step{{learn: "fast"}, {learn: "fast", seg: z1r2}, {freed: zone("z1")}},
			seg: z1r2, wantKnown: true, wantCount: 2},
		{name: "a deletion long after the hold changes nothing", steps: []step{{learn: "fast"}, {advance: 2 * hold}, {freed: rack("z1", "r1")}},
			seg: z1r1, wantKnown: true, wantCount: 1},
		{name: "a deletion in another rack keeps it", steps: []step{{learn: "fast"}, {freed: rack("z1", "r2")}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a deletion in another zone keeps it", steps: []step{{learn: "fast"}, {freed: zone("z2")}},
			seg: z1r1, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a smaller claim is not held", steps: []step{{learn: "fast", bytes: 50 * gi}}, seg: z1r1, bytes: gi,
			wantKnown: true, wantCount: 1},
		{name: "a claim as large is held", steps: []step{{learn: "fast", bytes: 50 * gi}}, seg: z1r1, bytes: 50 * gi,
			wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a success of a smaller volume keeps the mark", steps: []step{{learn: "fast", bytes: 50 * gi}, {seen: "fast", bytes: gi}},
			seg: z1r1, bytes: 50 * gi, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a success as large clears it", steps: []step{{learn: "fast", bytes: 50 * gi}, {advance: hold}, {seen: "fast", bytes: 50 * gi}},
			seg: z1r1, bytes: 50 * gi},
		{name: "a smaller refusal within the hold lowers the size", steps: []step{{learn: "fast", bytes: 50 * gi}, {learn: "fast", bytes: gi}},
			seg: z1r1, bytes: gi, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a larger refusal within the hold keeps the smaller size", steps: []step{{learn: "fast", bytes: gi}, {learn: "fast", bytes: 50 * gi}},
			seg: z1r1, bytes: gi, wantKnown: true, wantHeld: true, wantCount: 1},
		{name: "a larger refusal after the hold sets its size", steps: []step{{learn: "fast", bytes: gi}, {advance: hold}, {learn: "fast", bytes: 50 * gi}},
			seg: z1r1, bytes: gi, wantKnown: true, wantCount: 1},
		{name: "a mark not renewed is forgotten at the next learn", steps: []step{{learn: "fast"}, {advance: forgetHolds*hold + 1}, {learn: "slow"}},
			seg: z1r1, wantCount: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			reg := metrics.NewKubeRegistry()
			f := New(clk, hold, NewMetrics(reg))
			for _, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.advance))
				seg := s.seg
				if seg == nil {
					seg = z1r1
				}
				if s.learn != "" {
					f.Learn(ctx, s.learn, seg, s.wide, s.bytes, "test")
				}
				if s.seen != "" {
					f.Seen(ctx, s.seen, seg, s.bytes)
				}
				f.Freed(ctx, s.freed)
			}
			class := tc.class
			if class == "" {
				class = "fast"
			}
			st := f.Status(class, tc.seg, tc.bytes)
			if st.Known != tc.wantKnown || st.Held != tc.wantHeld || st.Wide != tc.wantWide {
				t.Errorf("status = known %v held %v wide %v, want known %v held %v wide %v",
					st.Known, st.Held, st.Wide, tc.wantKnown, tc.wantHeld, tc.wantWide)
			}
			if st.Known && st.Retry != st.Learned.Add(hold) {
				t.Errorf("retry %s, want learned %s + %s", st.Retry, st.Learned, hold)
			}
			if got, err := testutil.GetGaugeMetricValue(f.metrics.gauge); err != nil || int(got) != tc.wantCount {
				t.Errorf("full_segments gauge = %v (%v), want %d", got, err, tc.wantCount)
			}
		})
	}
}

func TestSegmentFullError(t *testing.T) {
	learned := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	err := &HeldError{Class: "fast", Segment: zoneKey + "=z1",
		Status: Status{Known: true, Held: true, Bytes: 50 * gi, Learned: learned, Retry: learned.Add(time.Minute)}}
	for _, want := range []string{zoneKey + "=z1", `had no room for StorageClass "fast" at 2026-01-01T12:00:00Z`, "asked again after 2026-01-01T12:01:00Z",
		"a volume of 50Gi was refused; a smaller claim is asked for at once"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
