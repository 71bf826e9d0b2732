package scheduler

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestCapacityNotPublished: a pod with a claim of a class created less
// than the grace ago waits while a segment it may use (a node with the
// driver, in the class's allowedTopologies, whose driver is not silent) has
// no capacity object of the class while another has; an older class, every
// segment published or none, a
// segment outside allowedTopologies or of a silent driver, and the grace
// turned off do not make it wait.
func TestCapacityNotPublished(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		age       time.Duration
		zones     []string // the class's allowedTopologies
		published []string
		silent    string // a node whose heartbeat expired
		grace     time.Duration
		// storageCapacity is the CSIDriver's (none when false).
		storageCapacity bool
		wantLeft        time.Duration // 0: no wait
		wantIn          string
	}{
		{name: "young class, z2 and z3 missing", age: 5 * time.Second, published: []string{"z1"},
			wantLeft: 25 * time.Second, wantIn: "2 of its 3 segments"},
		{name: "young class, all published", age: 5 * time.Second, published: []string{"z1", "z2", "z3"}},
		// Nobody publishes for the class (yet): no wait, VolumeBinding
		// decides (a CSIDriver without storageCapacity may have no
		// publisher at all); with storageCapacity VolumeBinding refuses
		// every node, so the pod waits.
		{name: "young class, none published", age: time.Second},
		{name: "young class, none published, storageCapacity", age: time.Second, storageCapacity: true,
			wantLeft: 29 * time.Second, wantIn: "3 of its 3 segments"},
		{name: "old class", age: 31 * time.Second, published: []string{"z1"}},
		{name: "missing zones outside allowedTopologies", age: 5 * time.Second, zones: []string{"z1"}, published: []string{"z1"}},
		{name: "missing zone of a silent driver", age: 5 * time.Second, published: []string{"z1", "z2"}, silent: "n3"},
		{name: "grace off", age: 5 * time.Second, published: []string{"z1"}, grace: -1},
		{name: "longer grace", age: 40 * time.Second, published: []string{"z1"}, grace: time.Minute, wantLeft: 20 * time.Second,
			wantIn: "waiting up to 20s more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			withCounterIndexes(t, w)
			cls := class("fast", tc.zones...)
			cls.CreationTimestamp = metav1.NewTime(now.Add(-tc.age))
			w.add(t, w.classes, cls)
			w.add(t, w.claims, claim("c1", "fast", gi))
			var nodes []*v1.Node
			for i, zone := range []string{"z1", "z2", "z3"} {
				n := node("n"+string(rune('1'+i)), zone)
				nodes = append(nodes, n)
				w.add(t, w.nodes, n)
				w.add(t, w.csiNodes, csiNode(n.Name, nil, driver))
			}
			// A node without the driver has no segment: never waited for.
			nodes = append(nodes, node("n4", "z4"))
			w.add(t, w.csiNodes, csiNode("n4", nil, "other.example.com"))
			for _, zone := range tc.published {
				w.add(t, w.capacities, capacity("fast", zone, 10*gi))
			}
			var opt OptionalSources
			if tc.storageCapacity {
				drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
				w.add(t, drivers, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
					Spec: storagev1.CSIDriverSpec{StorageCapacity: ptr.To(true)}})
				opt.CSIDrivers = storagelisters.NewCSIDriverLister(drivers)
			}
			if tc.silent != "" {
				opt.Liveness = testLiveness(t, "", heartbeatLease(driver, tc.silent, now.Add(-time.Minute), 4*time.Second))
			}
			c := w.coreFrom(t, Config{Driver: driver, CapacityPublishGrace: tc.grace}, func() time.Time { return now }, opt)
			podVols, err := c.PodVolumes(pod("p", "c1"))
			if err != nil {
				t.Fatal(err)
			}
			st, left := c.CapacityNotPublished(podVols, nodes)
			if tc.wantLeft == 0 {
				if st != nil {
					t.Fatalf("got %v, want no wait", st)
				}
				return
			}
			if st == nil || st.Reason != ReasonCapacityNotPublished || st.Unresolvable || left != tc.wantLeft || !strings.Contains(st.Message, tc.wantIn) {
				t.Fatalf("got %v, %s; want %s, %s left, a message with %q", st, left, ReasonCapacityNotPublished, tc.wantLeft, tc.wantIn)
			}
		})
	}
}

// TestCapacityNotPublishedWithoutCapacity: with capacity ignored nothing
// waits.
func TestCapacityNotPublishedWithoutCapacity(t *testing.T) {
	now := time.Now()
	w := newWorld(t)
	withCounterIndexes(t, w)
	cls := class("fast")
	cls.CreationTimestamp = metav1.NewTime(now)
	w.add(t, w.classes, cls)
	w.add(t, w.claims, claim("c1", "fast", gi))
	w.add(t, w.csiNodes, csiNode("n1", nil, driver))
	c := w.coreWith(t, Config{Driver: driver, IgnoreCapacity: true}, func() time.Time { return now })
	podVols, err := c.PodVolumes(pod("p", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := c.CapacityNotPublished(podVols, []*v1.Node{node("n1", "z1")}); st != nil {
		t.Fatalf("got %v with capacity ignored", st)
	}
}
