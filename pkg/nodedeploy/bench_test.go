package nodedeploy

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// The decisions a node deployment's instance takes for every claim and PV
// event of the cluster, each instance seeing every claim and PV: on a
// cluster of 5 000 nodes with 20 000 bound claims and their PVs (4 per
// node, the node-local segment kubernetes.io/hostname), the instance of
// node 0. Each iteration is one object; the Resync benchmark is one pass
// over all of them, as an initial list or an informer resync hands them to
// the handlers.
const (
	benchNodes        = 5000
	benchClaims       = 20000
	benchHostnameKey  = "kubernetes.io/hostname"
	benchDelayedClass = "local"
	benchImmediate    = "local-immediate"
)

func benchNodeName(i int) string { return fmt.Sprintf("node-%05d", i%benchNodes) }

// nodeDeploymentFixture is the cluster seen by the instance of node 0.
type nodeDeploymentFixture struct {
	nd      *Config
	claimer *Claimer
	claims  cache.Indexer
	// bound: bound claims of every node (as cached: managedFields
	// dropped), pvs: their PVs.
	bound []*v1.PersistentVolumeClaim
	pvs   []*v1.PersistentVolume
}

func newNodeDeploymentFixture(b *testing.B) *nodeDeploymentFixture {
	b.Helper()
	nd := (&Config{NodeName: benchNodeName(0), Topology: map[string]string{benchHostnameKey: benchNodeName(0)},
		ImmediateBinding: true}).WithDefaults()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range []*storagev1.StorageClass{makeClass(benchDelayedClass, false), makeClass(benchImmediate, true)} {
		if err := classes.Add(c); err != nil {
			b.Fatal(err)
		}
	}
	f := &nodeDeploymentFixture{nd: nd, claims: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	client := fake.NewClientset()
	claimer, err := NewClaimer(ClaimerConfig{Node: nd, DriverName: testDriver,
		Claims:  informers.NewSharedInformerFactory(client, 0).Core().V1().PersistentVolumeClaims().Informer(),
		Classes: storagelisters.NewStorageClassLister(classes), Nodes: corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)),
		Client: client.CoreV1(), Check: func(context.Context, *v1.PersistentVolumeClaim, *storagev1.StorageClass, *v1.Node) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	f.claimer = claimer
	for i := range benchClaims {
		node := benchNodeName(i)
		c := makePVC(fmt.Sprintf("data-%05d", i), benchDelayedClass).withSelectedNode(node).PersistentVolumeClaim
		c.Namespace = fmt.Sprintf("team-%02d", i%50)
		c.UID = types.UID(fmt.Sprintf("uid-%05d", i))
		c.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
		c.Annotations["volume.kubernetes.io/storage-provisioner"] = testDriver
		c.Spec.VolumeName = "pvc-" + string(c.UID)
		c.Status.Phase = v1.ClaimBound
		pv := &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: c.Spec.VolumeName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": testDriver}},
			Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-" + string(c.UID)}},
				ClaimRef:               &v1.ObjectReference{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
				StorageClassName:       benchDelayedClass,
				NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
					MatchExpressions: []v1.NodeSelectorRequirement{{Key: benchHostnameKey, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
				}}}},
			},
		}
		if err := f.claims.Add(c); err != nil {
			b.Fatal(err)
		}
		f.bound = append(f.bound, c)
		f.pvs = append(f.pvs, pv)
	}
	return f
}

// BenchmarkNodeDeploymentOwnsClaim: the library's claim filter (Config.OwnsClaim)
// on one claim event; one claim in 5 000 is the instance's.
func BenchmarkNodeDeploymentOwnsClaim(b *testing.B) {
	f := newNodeDeploymentFixture(b)
	i, own := 0, 0
	for b.Loop() {
		if f.nd.OwnsClaim(f.bound[i]) {
			own++
		}
		i = (i + 1) % benchClaims
	}
	if own == 0 && b.N >= benchNodes {
		b.Fatal("the instance owns none of its node's claims")
	}
}

// BenchmarkNodeDeploymentOwnsVolume: the library's PV filter and the
// deletion check on one PV event (node affinity against the node's
// topology); one PV in 5 000 is the instance's.
func BenchmarkNodeDeploymentOwnsVolume(b *testing.B) {
	f := newNodeDeploymentFixture(b)
	i, own := 0, 0
	for b.Loop() {
		if f.nd.OwnsVolume(f.pvs[i]) {
			own++
		}
		i = (i + 1) % benchClaims
	}
	if own == 0 && b.N >= benchNodes {
		b.Fatal("the instance owns none of its node's PVs")
	}
}

// BenchmarkNodeClaimerCandidate: the immediate-binding claimer's test on one
// claim event: a bound claim (the common case, answered from the claim), a
// pending delayed-binding claim without a node (a class lookup) and a
// pending immediate-binding claim nobody took yet (a class lookup, then a
// candidate).
func BenchmarkNodeClaimerCandidate(b *testing.B) {
	f := newNodeDeploymentFixture(b)
	cases := []struct {
		name      string
		claim     *v1.PersistentVolumeClaim
		candidate bool
	}{
		{"bound", f.bound[1], false},
		{"pending delayed", makePVC("pending", benchDelayedClass).forDriver().PersistentVolumeClaim, false},
		{"pending immediate", makePVC("pending", benchImmediate).forDriver().PersistentVolumeClaim, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if got := f.claimer.candidate(tc.claim) != nil; got != tc.candidate {
					b.Fatalf("candidate = %v, want %v", got, tc.candidate)
				}
			}
		})
	}
}

// BenchmarkNodeDeploymentResync: one pass over the 20 000 claims and 20 000
// PVs through the instance's own handlers (the library's filters and the
// claimer's observe), as an initial list or a resync delivers them; ns/op
// is the pass, ns/object its share per claim or PV.
func BenchmarkNodeDeploymentResync(b *testing.B) {
	f := newNodeDeploymentFixture(b)
	noop := cache.ResourceEventHandlerFuncs{}
	claimFilter := cache.FilteringResourceEventHandler{FilterFunc: f.nd.OwnsClaim, Handler: noop}
	pvFilter := cache.FilteringResourceEventHandler{FilterFunc: f.nd.OwnsVolume, Handler: noop}
	for b.Loop() {
		for i := range benchClaims {
			claimFilter.OnUpdate(f.bound[i], f.bound[i])
			f.claimer.observe(f.bound[i])
			pvFilter.OnUpdate(f.pvs[i], f.pvs[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*benchClaims), "ns/object")
}

// BenchmarkNodeClaimerListCandidates: the claimer's walk over every cached
// claim when the instance starts (claims that waited before it), 20 000
// bound claims and none to take.
func BenchmarkNodeClaimerListCandidates(b *testing.B) {
	f := newNodeDeploymentFixture(b)
	f.claimer.claims = corelisters.NewPersistentVolumeClaimLister(f.claims)
	for b.Loop() {
		if got := f.claimer.listCandidates(); len(got) != 0 {
			b.Fatalf("%d candidates, want none", len(got))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchClaims, "ns/claim")
}
