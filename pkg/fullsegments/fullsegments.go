// Package fullsegments remembers which (StorageClass, topology segment)
// pairs the CSI driver recently found without room, so that delayed claims
// of at least the refused size on nodes there go back to the scheduler
// instead of costing a CreateVolume (and the DeleteVolume of a volume
// placed out of the node's reach) on every reschedule.
package fullsegments

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

// forgetHolds: a mark not renewed for this many hold times is dropped,
// so classes and segments that are gone do not stay in memory; a dropped
// mark costs at most one more non-strict attempt.
const forgetHolds = 10

// Holds remembers, per (StorageClass name, segment of a selected
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
// forgetHolds hold times.
type Holds struct {
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

// New returns empty Holds on clock c (the real clock when nil) that hold a
// segment for hold after it was found full; the number of marks is
// published in m (nil: not published).
func New(c clock.PassiveClock, hold time.Duration, m *Metrics) *Holds {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Holds{clock: c, hold: hold, metrics: m, marks: map[fullKey]fullMark{}}
}

// Status is what Holds knows of a (class, segment).
type Status struct {
	// Known: the segment is known to have had no room for the class;
	// requirements for it are strict unless Wide.
	Known bool
	// Wide: learned from a volume placed in several segments.
	Wide bool
	// Held: within the hold after learned, and the claim is at least as
	// large as the smallest volume refused; the driver is not asked.
	Held bool
	// Bytes is the smallest size refused within the hold (0: unknown).
	Bytes int64
	// Learned is when the segment was last found full; Retry is when the
	// driver is asked again.
	Learned, Retry time.Time
}

// Status reports what is known of seg for class, for a claim of bytes.
func (f *Holds) Status(class string, seg topology.Segment, bytes int64) Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.marks[fullKey{class, seg.String()}]
	if !ok {
		return Status{}
	}
	retry := m.learned.Add(f.hold)
	held := f.clock.Now().Before(retry) && bytes >= m.bytes
	return Status{Known: true, Held: held, Wide: m.wide, Bytes: m.bytes, Learned: m.learned, Retry: retry}
}

// Learn marks seg full for class from now on for volumes of bytes and more
// (renewing an earlier mark; within its hold, the smaller size of the two
// is kept) and drops marks not renewed for forgetHolds hold times.
// wide: see fullMark.
func (f *Holds) Learn(ctx context.Context, class string, seg topology.Segment, wide bool, bytes int64, why string) {
	f.mu.Lock()
	now := f.clock.Now()
	for k, m := range f.marks {
		if now.Sub(m.learned) > forgetHolds*f.hold {
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
	f.metrics.set(n)
	klog.FromContext(ctx).V(2).Info("Segment has no room for the class; no CreateVolume of this size or more for it until the hold has passed",
		"segment", seg.String(), "storageClass", class, "why", why, "bytes", bytes, "retryAt", now.Add(f.hold))
}

// Seen clears the mark of seg for class: the driver made a volume of bytes
// there, at least as large as the smallest one refused. A smaller volume
// leaves the mark: it tells nothing of room for the larger one.
func (f *Holds) Seen(ctx context.Context, class string, seg topology.Segment, bytes int64) {
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
		f.metrics.set(n)
		klog.FromContext(ctx).V(2).Info("Capacity seen again", "segment", seg.String(), "storageClass", class)
	}
}

// Freed ends, for every class, the hold of segments a deleted volume was in:
// room was freed there. The marks stay, so the next ask is strict. A volume segment and a mark match when they
// share a key and agree on every key they share, so a volume reported by
// zone alone frees every zone×rack segment of its zone.
func (f *Holds) Freed(ctx context.Context, volume []*csi.Topology) {
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

// HeldError is the error of an attempt within the hold: the class and the
// segment (as topology.Segment.String) held, and what is known of them.
type HeldError struct {
	Class   string
	Segment string
	Status  Status
}

// Error says when the segment was found full and when the driver is asked again.
func (e *HeldError) Error() string {
	size := ""
	if e.Status.Bytes > 0 {
		size = fmt.Sprintf(" (a volume of %s was refused; a smaller claim is asked for at once)", resource.NewQuantity(e.Status.Bytes, resource.BinarySI))
	}
	return fmt.Sprintf("segment %s had no room for StorageClass %q at %s%s; the driver is asked again after %s, or sooner when a volume there is deleted",
		e.Segment, e.Class, e.Status.Learned.UTC().Format(time.RFC3339), size, e.Status.Retry.UTC().Format(time.RFC3339))
}

// NodeSegment returns the selected node's segment of delayed-binding
// requirements (their first preferred segment), nil without requirements.
func NodeSegment(reqs *csi.TopologyRequirement) topology.Segment {
	if len(reqs.GetPreferred()) == 0 {
		return nil
	}
	return topology.Segment(reqs.GetPreferred()[0].GetSegments())
}

// OnlySegment returns requirements of exactly seg, requisite and preferred.
func OnlySegment(seg topology.Segment) *csi.TopologyRequirement {
	t := []*csi.Topology{{Segments: map[string]string(seg)}}
	return &csi.TopologyRequirement{Requisite: t, Preferred: t}
}
