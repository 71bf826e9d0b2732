package scheduler

import (
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// zoneAffinity is a PV node affinity: one term per zone list.
func zoneAffinity(zones ...string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: zones}}}}}}
}

// cloneOf is a pending claim of class "fast" whose dataSource is the claim
// src (with dataSourceRef too when ref).
func cloneOf(name, src string, ref bool) *v1.PersistentVolumeClaim {
	c := claim(name, "fast", gi)
	c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src}
	if ref {
		c.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: src}
	}
	return c
}

// restoreOf is a pending claim of class "fast" restoring snapshot snap.
func restoreOf(name, snap string) *v1.PersistentVolumeClaim {
	c := claim(name, "fast", gi)
	c.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: snap}
	c.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: snap}
	return c
}

// hostNode is a node with its kubernetes.io/hostname label, as kubelet
// sets it.
func hostNode(name, zone string) *v1.Node {
	n := node(name, zone)
	n.Labels[v1.LabelHostname] = name
	return n
}

// inClass moves a claim into another class.
func inClass(c *v1.PersistentVolumeClaim, class string) *v1.PersistentVolumeClaim {
	c.Spec.StorageClassName = &class
	return c
}

func snapshot(name string, claim *string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: claim}}}
}

// sourceWorld: nodes n1 (z1) and n2 (z2) with the driver; classes "fast",
// "near" (copies near their source) and "anywhere" (copies anywhere); claim
// "src" bound to pv-src reachable from z1 only, "src-local" bound to pv-local
// reachable from node n1 only (node-bound), "src-free" bound to a PV without
// affinity, "src-unbound" pending; snapshots "snap" of src, "snap-free" of
// src-free, "snap-local" of src-local, "snap-content" of a pre-provisioned content, "snap-gone" of a
// claim that no longer exists.
func sourceWorld(t *testing.T, withSnapshots bool) (*world, *Core) {
	t.Helper()
	w := newWorld(t)
	withCounterIndexes(t, w)
	near, anywhere := class("near"), class("anywhere")
	near.Annotations = map[string]string{topology.AnnCopyPlacement: "source"}
	anywhere.Annotations = map[string]string{topology.AnnCopyPlacement: "anywhere"}
	w.add(t, w.classes, class("fast"), near, anywhere)
	w.add(t, w.nodes, node("n1", "z1"), node("n2", "z2"))
	w.add(t, w.csiNodes, csiNode("n1", nil, driver), csiNode("n2", nil, driver))
	src := csiVolume("pv-src", "h-src")
	src.Spec.NodeAffinity = zoneAffinity("z1")
	local := csiVolume("pv-local", "h-local")
	local.Spec.NodeAffinity = zoneAffinity("z1")
	local.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions = append(local.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions,
		v1.NodeSelectorRequirement{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}})
	w.add(t, w.volumes, src, local, csiVolume("pv-free", "h-free"))
	w.add(t, w.claims, boundClaim("src", "pv-src"), boundClaim("src-local", "pv-local"), boundClaim("src-free", "pv-free"), claim("src-unbound", "fast", gi))
	var opt OptionalSources
	if withSnapshots {
		snaps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		w.add(t, snaps, snapshot("snap", ptr.To("src")), snapshot("snap-local", ptr.To("src-local")), snapshot("snap-free", ptr.To("src-free")),
			snapshot("snap-content", nil), snapshot("snap-gone", ptr.To("deleted")))
		opt.Snapshots = NewSnapshotSource(snaplisters.NewVolumeSnapshotLister(snaps))
	}
	return w, w.coreFrom(t, Config{Driver: driver}, nil, opt)
}

func TestFilterDataSource(t *testing.T) {
	populator := claim("populated", "fast", gi)
	populator.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: ptr.To("example.com"), Kind: "Populator", Name: "src"}
	crossNS := cloneOf("cross", "src", true)
	crossNS.Spec.DataSourceRef.Namespace = ptr.To("other")
	refOnly := claim("ref-only", "fast", gi)
	refOnly.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
	claims := []*v1.PersistentVolumeClaim{cloneOf("clone", "src", false), cloneOf("clone-ref", "src", true), refOnly,
		cloneOf("clone-free", "src-free", true), cloneOf("clone-unbound", "src-unbound", true), cloneOf("clone-missing", "missing", true),
		restoreOf("restore", "snap"), restoreOf("restore-free", "snap-free"), restoreOf("restore-content", "snap-content"),
		restoreOf("restore-gone", "snap-gone"), restoreOf("restore-unknown", "nope"), populator, crossNS,
		restoreOf("restore-local", "snap-local"), inClass(restoreOf("restore-near", "snap"), "near"),
		inClass(restoreOf("restore-local-anywhere", "snap-local"), "anywhere"), inClass(cloneOf("clone-anywhere", "src", true), "anywhere"),
		inClass(restoreOf("restore-unknown-anywhere", "nope"), "anywhere")}
	const cloneMsg = "claim ns/clone clones ns/src, whose volume is reachable only from " + zoneKey + " in (z1) (a clone is made where its source volume is reachable)"
	const restoreMsg = "claim ns/restore-local restores snapshot ns/snap-local of ns/src-local, whose volume is reachable only from " + zoneKey +
		" in (z1),kubernetes.io/hostname in (n1) (the snapshot was taken of a node-bound volume, so it is restored on that node)"
	tests := []struct {
		name         string
		claim        string
		noSnapshots  bool
		rejectedOnZ2 bool
		// waits: both nodes rejected with DataSourceUnknown.
		waits       bool
		wantMessage string
	}{
		{name: "clone by dataSource", claim: "clone", rejectedOnZ2: true, wantMessage: cloneMsg},
		{name: "clone by dataSource and dataSourceRef", claim: "clone-ref", rejectedOnZ2: true},
		{name: "clone by dataSourceRef only", claim: "ref-only", rejectedOnZ2: true},
		{name: "source volume without affinity", claim: "clone-free"},
		{name: "source claim unbound", claim: "clone-unbound"},
		{name: "source claim missing", claim: "clone-missing"},
		{name: "restore of a zonal volume: anywhere, as upstream", claim: "restore"},
		{name: "restore of a node-bound volume: on its node", claim: "restore-local", rejectedOnZ2: true, wantMessage: restoreMsg},
		{name: "restore, class keeps copies near the source", claim: "restore-near", rejectedOnZ2: true},
		{name: "restore of a node-bound volume, class places copies anywhere", claim: "restore-local-anywhere"},
		{name: "clone, class places copies anywhere", claim: "clone-anywhere"},
		{name: "restore, snapshot unknown, class places copies anywhere", claim: "restore-unknown-anywhere"},
		{name: "restore without snapshot support", claim: "restore-local", noSnapshots: true},
		{name: "restore, snapshot's volume without affinity", claim: "restore-free"},
		{name: "restore of a pre-provisioned content", claim: "restore-content"},
		{name: "restore, snapshot's claim gone", claim: "restore-gone"},
		{name: "restore, snapshot unknown", claim: "restore-unknown", waits: true,
			wantMessage: "claim ns/restore-unknown restores snapshot ns/nope, and the VolumeSnapshot does not exist yet; the pod waits until it is known, so that the volume is made in reach of the snapshot's source"},
		{name: "populator", claim: "populated"},
		{name: "cross-namespace dataSourceRef", claim: "cross"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, c := sourceWorld(t, !tc.noSnapshots)
			for _, cl := range claims {
				w.add(t, w.claims, cl)
			}
			podVols, err := c.PodVolumes(pod("p", tc.claim))
			if err != nil || podVols == nil || len(podVols.Pending) != 1 {
				t.Fatalf("PodVolumes = %v, %v; want one pending claim", podVols, err)
			}
			if tc.waits {
				for _, n := range []*v1.Node{hostNode("n1", "z1"), hostNode("n2", "z2")} {
					st := c.Filter(podVols, n)
					if st == nil || st.Reason != ReasonDataSourceUnknown || !st.Unresolvable || st.Message != tc.wantMessage {
						t.Errorf("Filter(%s) = %v, want %s, unresolvable, %q", n.Name, st, ReasonDataSourceUnknown, tc.wantMessage)
					}
				}
				return
			}
			if st := c.Filter(podVols, hostNode("n1", "z1")); st != nil {
				t.Errorf("Filter(n1 in z1) = %v, want fit", st)
			}
			st := c.Filter(podVols, hostNode("n2", "z2"))
			switch {
			case !tc.rejectedOnZ2 && st != nil:
				t.Errorf("Filter(n2 in z2) = %v, want fit", st)
			case tc.rejectedOnZ2 && (st == nil || st.Reason != ReasonDataSourceUnreachable || !st.Unresolvable):
				t.Errorf("Filter(n2 in z2) = %v, want %s, unresolvable", st, ReasonDataSourceUnreachable)
			case tc.wantMessage != "" && st.Message != tc.wantMessage:
				t.Errorf("message %q, want %q", st.Message, tc.wantMessage)
			}
		})
	}
}

func TestDescribeTerms(t *testing.T) {
	tests := []struct {
		name  string
		terms []v1.NodeSelectorTerm
		want  string
	}{
		{name: "one zone", terms: zoneAffinity("z1").Required.NodeSelectorTerms, want: zoneKey + " in (z1)"},
		{name: "two zones sorted", terms: zoneAffinity("z2", "z1").Required.NodeSelectorTerms, want: zoneKey + " in (z1,z2)"},
		{name: "terms ORed, expressions ANDed, fields", terms: []v1.NodeSelectorTerm{
			{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}},
				{Key: "rack", Operator: v1.NodeSelectorOpNotIn, Values: []string{"r2"}},
				{Key: "ssd", Operator: v1.NodeSelectorOpExists},
				{Key: "gen", Operator: v1.NodeSelectorOpGt, Values: []string{"3"}}}},
			{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n7"}}}},
		}, want: "zone in (z1),rack notin (r2),ssd,gen>3 or metadata.name in (n7)"},
		{name: "empty term", terms: []v1.NodeSelectorTerm{{}}, want: "nowhere"},
		{name: "unknown operator", terms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "zone", Operator: "Near", Values: []string{"z1"}}}}}, want: "zone Near [z1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeTerms(tc.terms); got != tc.want {
				t.Errorf("describeTerms = %q, want %q", got, tc.want)
			}
		})
	}
}
