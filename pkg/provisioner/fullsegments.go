package provisioner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// fullForgetHolds: a mark not renewed for this many hold times is dropped,
// so classes and segments that are gone do not stay in memory; a dropped
// mark costs at most one more non-strict attempt.
const fullForgetHolds = 10

// fullSegments remembers, per (StorageClass name, segment of a selected
// node for the driver's keys), that the driver found no room there for the
// class: it placed a delayed claim's volume out of the node's reach, or
// answered RESOURCE_EXHAUSTED. Each mark keeps the size of the smallest
// volume refused within its hold: only claims at least that large are held,
// a smaller one is asked for (the segment's last room may fit it), and only
// a success at least that large clears the mark. Safe for concurrent use;
// no API calls.
//
// Why: with the stock scheduler, a pod pinned to a full zone comes back to
// a node of that zone after every reschedule. Without this memory each
// round trip cost a CreateVolume that the driver placed in another zone and
// a DeleteVolume of it. With it:
//
//	t=0     node n1 in zone=z1: requisite z1,z2,z3 → driver places in z2
//	        → deleted, mark (class, zone=z1), Reschedule (VolumeNotAccessible)
//	t<hold  node n1 again: no CreateVolume, Reschedule (NoCapacity)
//	t<hold  a smaller claim on n1: requisite = preferred = zone=z1 only
//	t≥hold  node n1 again: requisite = preferred = zone=z1 only
//	        → RESOURCE_EXHAUSTED renews the mark, success clears it
//	any t   a PV in zone=z1 deleted: the mark is cleared for every class
//
// Memory is bounded by the (class, segment) pairs found full in the last
// fullForgetHolds hold times.
type fullSegments struct {
	clock   clock.PassiveClock
	hold    time.Duration
	metrics *Metrics

	mu    sync.Mutex
	marks map[fullKey]fullMark
}

type fullKey struct{ class, segment string }

type fullMark struct {
	seg     topology.Segment
	learned time.Time
	// wide: the driver placed one volume in several segments, so a
	// request of the node's segment alone could never be met; after the
	// hold it gets the usual requirements.
	wide bool
	// bytes is the smallest size (CreateVolume's required bytes) refused
	// within the hold; 0 when unknown, which holds claims of every size.
	bytes int64
}

func newFullSegments(c clock.PassiveClock, hold time.Duration, m *Metrics) *fullSegments {
	if c == nil {
		c = clock.RealClock{}
	}
	return &fullSegments{clock: c, hold: hold, metrics: m, marks: map[fullKey]fullMark{}}
}

// fullStatus is what fullSegments knows of a (class, segment).
type fullStatus struct {
	// known: the segment is known to have had no room for the class;
	// requirements for it are strict unless wide.
	known bool
	// wide: learned from a volume placed in several segments.
	wide bool
	// held: within the hold after learned, and the claim is at least as
	// large as the smallest volume refused; the driver is not asked.
	held bool
	// bytes is the smallest size refused within the hold (0: unknown).
	bytes int64
	// learned is when the segment was last found full; retry is when the
	// driver is asked again.
	learned, retry time.Time
}

// status reports what is known of seg for class, for a claim of bytes.
func (f *fullSegments) status(class string, seg topology.Segment, bytes int64) fullStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.marks[fullKey{class, seg.String()}]
	if !ok {
		return fullStatus{}
	}
	retry := m.learned.Add(f.hold)
	held := f.clock.Now().Before(retry) && bytes >= m.bytes
	return fullStatus{known: true, held: held, wide: m.wide, bytes: m.bytes, learned: m.learned, retry: retry}
}

// learn marks seg full for class from now on for volumes of bytes and more
// (renewing an earlier mark; within its hold, the smaller size of the two
// is kept) and drops marks not renewed for fullForgetHolds hold times.
// wide: see fullMark.
func (f *fullSegments) learn(ctx context.Context, class string, seg topology.Segment, wide bool, bytes int64, why string) {
	f.mu.Lock()
	now := f.clock.Now()
	for k, m := range f.marks {
		if now.Sub(m.learned) > fullForgetHolds*f.hold {
			delete(f.marks, k)
		}
	}
	k := fullKey{class, seg.String()}
	if old, ok := f.marks[k]; ok && now.Before(old.learned.Add(f.hold)) && old.bytes < bytes {
		bytes = old.bytes
	}
	f.marks[k] = fullMark{seg: seg, learned: now, wide: wide, bytes: bytes}
	n := len(f.marks)
	f.mu.Unlock()
	f.metrics.setFullSegments(n)
	klog.FromContext(ctx).V(2).Info("Segment has no room for the class; no CreateVolume of this size or more for it until the hold has passed",
		"segment", seg.String(), "storageClass", class, "why", why, "bytes", bytes, "retryAt", now.Add(f.hold))
}

// seen clears the mark of seg for class: the driver made a volume of bytes
// there, at least as large as the smallest one refused. A smaller volume
// leaves the mark: it tells nothing of room for the larger one.
func (f *fullSegments) seen(ctx context.Context, class string, seg topology.Segment, bytes int64) {
	f.mu.Lock()
	k := fullKey{class, seg.String()}
	m, ok := f.marks[k]
	ok = ok && bytes >= m.bytes
	if ok {
		delete(f.marks, k)
	}
	n := len(f.marks)
	f.mu.Unlock()
	if ok {
		f.metrics.setFullSegments(n)
		klog.FromContext(ctx).V(2).Info("Capacity seen again", "segment", seg.String(), "storageClass", class)
	}
}

// freed ends, for every class, the hold of segments a deleted volume was in:
// room was freed there. The marks stay, so the next ask is strict. A volume segment and a mark match when they
// share a key and agree on every key they share, so a volume reported by
// zone alone frees every zone×rack segment of its zone.
func (f *fullSegments) freed(ctx context.Context, volume []*csi.Topology) {
	if len(volume) == 0 {
		return
	}
	f.mu.Lock()
	var cleared []fullKey
	// The hold ends, but the mark stays: the next attempt asks the driver
	// for the node's segment only, so the room freed there is used and no
	// volume lands out of the node's reach if the room is gone again.
	ended := f.clock.Now().Add(-f.hold)
	for k, m := range f.marks {
		for _, t := range volume {
			if overlaps(m.seg, t.GetSegments()) {
				if m.learned.After(ended) {
					m.learned = ended
					f.marks[k] = m
				}
				cleared = append(cleared, k)
				break
			}
		}
	}
	f.mu.Unlock()
	logger := klog.FromContext(ctx)
	for _, k := range cleared {
		logger.V(2).Info("Volume deleted in a segment known full; asking the driver again for that segment only", "segment", k.segment, "storageClass", k.class)
	}
}

// overlaps reports whether a and b share at least one key and agree on
// every key they share.
func overlaps(a topology.Segment, b map[string]string) bool {
	shared := false
	for k, v := range a {
		if bv, ok := b[k]; ok {
			if bv != v {
				return false
			}
			shared = true
		}
	}
	return shared
}

// segmentFullError is the error of an attempt within the hold.
type segmentFullError struct {
	class   string
	segment string
	status  fullStatus
}

func (e *segmentFullError) Error() string {
	size := ""
	if e.status.bytes > 0 {
		size = fmt.Sprintf(" (a volume of %s was refused; a smaller claim is asked for at once)", resource.NewQuantity(e.status.bytes, resource.BinarySI))
	}
	return fmt.Sprintf("segment %s had no room for StorageClass %q at %s%s; the driver is asked again after %s, or sooner when a volume there is deleted",
		e.segment, e.class, e.status.learned.UTC().Format(time.RFC3339), size, e.status.retry.UTC().Format(time.RFC3339))
}

// nodeSegment returns the selected node's segment of delayed-binding
// requirements (their first preferred segment), nil without requirements.
func nodeSegment(reqs *csi.TopologyRequirement) topology.Segment {
	if len(reqs.GetPreferred()) == 0 {
		return nil
	}
	return topology.Segment(reqs.GetPreferred()[0].GetSegments())
}

// onlySegment returns requirements of exactly seg, requisite and preferred.
func onlySegment(seg topology.Segment) *csi.TopologyRequirement {
	t := []*csi.Topology{{Segments: map[string]string(seg)}}
	return &csi.TopologyRequirement{Requisite: t, Preferred: t}
}
