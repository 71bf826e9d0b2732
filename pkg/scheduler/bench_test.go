package scheduler

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// nodeKey is the topology key of node-local segments.
const nodeKey = "topology.mock.csi.example.com/node"

// benchNodes, benchVolumesPerNode and benchReservations size the
// benchmarks: 5 000 nodes with a segment and a capacity object each, 50 000
// bound PVs with their claims and pods, and 1 000 reservations in flight in
// the target node's bucket.
const (
	benchNodes          = 5000
	benchVolumesPerNode = 10
	benchReservations   = 1000
)

// benchWorld builds the cluster of the benchmarks. Every node has the
// attach limit 2 000 so that the reservations in flight fit.
func benchWorld(b *testing.B) *world {
	b.Helper()
	w := newWorld(b)
	withCounterIndexes(b, w)
	w.add(b, w.classes, class("fast"))
	for n := 0; n < benchNodes; n++ {
		name := fmt.Sprintf("node-%d", n)
		w.add(b, w.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodeKey: name}}})
		w.add(b, w.csiNodes, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: driver, NodeID: name, TopologyKeys: []string{nodeKey}, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](2000)}}}}})
		w.add(b, w.capacities, &storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{Namespace: "csi", Name: "fast-" + name},
			StorageClassName: "fast",
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{nodeKey: name}},
			Capacity:         resource.NewQuantity(1<<50, resource.BinarySI),
		})
		for i := 0; i < benchVolumesPerNode; i++ {
			id := fmt.Sprintf("%d-%d", n, i)
			w.add(b, w.volumes, csiVolume("pv-"+id, id))
			w.add(b, w.claims, boundClaim("c-"+id, "pv-"+id))
			p := pod("p-"+id, "c-"+id)
			p.Spec.NodeName = name
			w.add(b, w.pods, p)
		}
	}
	w.add(b, w.claims, claim("new-1", "fast", gi), claim("new-2", "fast", gi))
	// A clone source reachable from node-2500's segment only, and a clone.
	src := csiVolume("pv-src", "src")
	src.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: nodeKey, Operator: v1.NodeSelectorOpIn, Values: []string{"node-2500"}}}}}}}
	w.add(b, w.volumes, src)
	w.add(b, w.claims, boundClaim("src", "pv-src"), cloneOf("new-clone", "src", true))
	return w
}

// benchCores returns, over one world, a Core without reservations and one
// with benchReservations of other pods in flight in the target node's
// bucket, both reading opt, and the target node.
func benchCores(b *testing.B, opt OptionalSources) (map[string]*Core, *v1.Node) {
	b.Helper()
	w := benchWorld(b)
	target := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2500", Labels: map[string]string{nodeKey: "node-2500"}}}
	weights := ScoreWeights{FreeCapacity: 1, VolumeHeadroom: 1}
	idle := w.coreFrom(b, Config{Driver: driver, ScoreWeights: weights}, nil, opt)
	busy := w.coreFrom(b, Config{Driver: driver, ScoreWeights: weights}, nil, opt)
	for i := 0; i < benchReservations; i++ {
		busy.Ledger().Reserve(Request{UID: types.UID(fmt.Sprintf("r-%d", i)), Claim: fmt.Sprintf("ns/r-%d", i), Pod: fmt.Sprintf("ns/rp-%d", i),
			Node: target.Name, Segment: nodeKey + "=" + target.Name, Class: "fast", Bytes: gi})
	}
	return map[string]*Core{"reservations=0": idle, fmt.Sprintf("reservations=%d", benchReservations): busy}, target
}

// BenchmarkFilter filters one node for a pod with two pending claims in a
// cluster of 5 000 nodes (node-local segments, one capacity object each)
// and 50 000 bound PVs, without and with 1 000 reservations in flight in
// the node's bucket: driver keys, allowedTopologies, attach limit (with the
// reservations on the node), capacity minus reservations.
func BenchmarkFilter(b *testing.B) {
	benchEach(b, func(b *testing.B, c *Core, podVols *PodVolumes, target *v1.Node) {
		if st := c.Filter(podVols, target); st != nil {
			b.Fatal(st)
		}
	})
}

// BenchmarkScore scores the same node for the same pod with both score
// weights 1 (free capacity and attach headroom).
func BenchmarkScore(b *testing.B) {
	benchEach(b, func(b *testing.B, c *Core, podVols *PodVolumes, target *v1.Node) {
		if s := c.Score(podVols, target); s <= 0 {
			b.Fatalf("score %d", s)
		}
	})
}

// benchEach runs op in a loop for a pod with two pending claims on the
// target node of each benchmark Core (without and with reservations).
func benchEach(b *testing.B, op func(*testing.B, *Core, *PodVolumes, *v1.Node)) {
	cores, target := benchCores(b, OptionalSources{})
	for _, name := range []string{"reservations=0", fmt.Sprintf("reservations=%d", benchReservations)} {
		c := cores[name]
		podVols, err := c.PodVolumes(pod("new", "new-1", "new-2"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				op(b, c, podVols, target)
			}
		})
	}
}

// BenchmarkPodVolumes collects, in the benchmark cluster (5 000 nodes,
// 50 000 bound claims), the volumes of a pod with a plain pending claim
// and a clone of a claim whose PV reaches one node's segment only: what
// PreFilter (and each extender request) does once per pod. The clone's
// source costs lookups by key, independent of the number of claims, PVs
// and nodes.
func BenchmarkPodVolumes(b *testing.B) {
	c := benchWorld(b).core(b, nil)
	p := pod("new", "new-1", "new-clone")
	b.ReportAllocs()
	for b.Loop() {
		podVols, err := c.PodVolumes(p)
		if err != nil || len(podVols.Pending) != 2 || podVols.Pending[1].Source == nil {
			b.Fatalf("PodVolumes = %v, %v", podVols, err)
		}
	}
}

// BenchmarkFilterClone filters, for the pod of BenchmarkPodVolumes, the
// node that reaches the clone's source and one that does not (rejected
// with DataSourceUnreachable: the message is built once per pod, not per
// node).
func BenchmarkFilterClone(b *testing.B) {
	c := benchWorld(b).core(b, nil)
	podVols, err := c.PodVolumes(pod("new", "new-1", "new-clone"))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		node string
		want Reason
	}{
		{name: "reachable", node: "node-2500"},
		{name: "unreachable", node: "node-17", want: ReasonDataSourceUnreachable},
	} {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node, Labels: map[string]string{nodeKey: tc.node}}}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st := c.Filter(podVols, n)
				if (st == nil) != (tc.want == "") || (st != nil && st.Reason != tc.want) {
					b.Fatalf("Filter = %v, want %q", st, tc.want)
				}
			}
		})
	}
}

// BenchmarkFilterHeartbeat filters the target node as BenchmarkFilter does,
// with the live-driver check on over 5 000 heartbeat Leases (one per node,
// all live): the check is one index lookup, independent of the number of
// Leases.
func BenchmarkFilterHeartbeat(b *testing.B) {
	now := time.Now()
	leases := make([]*coordinationv1.Lease, 0, benchNodes)
	for n := 0; n < benchNodes; n++ {
		leases = append(leases, heartbeatLease(driver, fmt.Sprintf("node-%d", n), now, time.Hour))
	}
	cores, target := benchCores(b, OptionalSources{Liveness: testLiveness(b, "", leases...)})
	c := cores["reservations=0"]
	podVols, err := c.PodVolumes(pod("new", "new-1", "new-2"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if st := c.Filter(podVols, target); st != nil {
			b.Fatal(st)
		}
	}
}

// BenchmarkCycle is what the plugin adds to one scheduling cycle of a pod
// with two pending claims of one class, as `make bench` scenario B runs it:
// Filter, then Score, on every node of a cluster of 1 000 and of 5 000
// nodes over 10 zones (the driver's topology key), one capacity object per
// zone, no attach limit, one ns/op per cycle. Every cycle sees the same
// Node and CSINode objects, as kube-scheduler's snapshot does between
// updates.
func BenchmarkCycle(b *testing.B) {
	for _, size := range []int{1000, 5000} {
		w := newWorld(b)
		withCounterIndexes(b, w)
		w.add(b, w.classes, class("fast"))
		nodes := make([]*v1.Node, size)
		for n := range nodes {
			zone := fmt.Sprintf("zone-%d", n%10)
			nodes[n] = node(fmt.Sprintf("node-%d", n), zone)
			nodes[n].Labels["kubernetes.io/hostname"] = nodes[n].Name
			w.add(b, w.nodes, nodes[n])
			w.add(b, w.csiNodes, csiNode(nodes[n].Name, nil, driver))
		}
		for z := 0; z < 10; z++ {
			w.add(b, w.capacities, capacity("fast", fmt.Sprintf("zone-%d", z), 1<<50))
		}
		w.add(b, w.claims, claim("new-1", "fast", gi), claim("new-2", "fast", gi))
		p := pod("new", "new-1", "new-2")
		// csinodes=lister checks each cached segment against the CSINode
		// lister (a Core from New); csinodes=events trusts it until a
		// CSINode event (NewFromInformers, what the plugin and the
		// extender run).
		for _, mode := range []string{"lister", "events"} {
			c := w.coreWith(b, Config{Driver: driver, CSINodeEvents: mode == "events"}, nil)
			b.Run(fmt.Sprintf("nodes=%d/csinodes=%s", size, mode), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					podVols, err := c.PodVolumes(p)
					if err != nil {
						b.Fatal(err)
					}
					for _, n := range nodes {
						if st := c.Filter(podVols, n); st != nil {
							b.Fatal(st)
						}
					}
					for _, n := range nodes {
						if s := c.Score(podVols, n); s <= 0 {
							b.Fatalf("score %d", s)
						}
					}
				}
			})
		}
	}
}
