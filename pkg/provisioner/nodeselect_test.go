package provisioner

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// TestLabelSelectionScopesInformers: with selection by label the factory's
// claim and PV informers, which every consumer shares, list only the
// node's objects (and the driver's pool of claims with immediate binding),
// by label selector; without it, everything.
func TestLabelSelectionScopesInformers(t *testing.T) {
	pool := nodelabel.PoolValue(testDriver)
	claim := func(name, label string) runtime.Object {
		c := makePVC(name, "zonal").PersistentVolumeClaim
		if label != "" {
			c.Labels = map[string]string{nodelabel.Key: label}
		}
		return c
	}
	pv := func(name, label string) runtime.Object {
		p := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if label != "" {
			p.Labels = map[string]string{nodelabel.Key: label}
		}
		return p
	}
	objs := []runtime.Object{claim("own", "n1"), claim("other", "n2"), claim("pooled", pool), claim("unlabelled", ""),
		claim("other-pool", nodelabel.PoolValue("other.example.com")), pv("pv-own", "n1"), pv("pv-other", "n2"), pv("pv-unlabelled", "")}
	tests := []struct {
		name                   string
		node                   *nodedeploy.Config
		wantClaims, wantVolume []string
	}{
		{name: "label, immediate binding", node: &nodedeploy.Config{NodeName: "n1", ImmediateBinding: true, LabelSelection: true},
			wantClaims: []string{"own", "pooled"}, wantVolume: []string{"pv-own"}},
		{name: "label, no immediate binding", node: &nodedeploy.Config{NodeName: "n1", LabelSelection: true},
			wantClaims: []string{"own"}, wantVolume: []string{"pv-own"}},
		{name: "all", node: &nodedeploy.Config{NodeName: "n1", ImmediateBinding: true},
			wantClaims: []string{"other", "other-pool", "own", "pooled", "unlabelled"}, wantVolume: []string{"pv-other", "pv-own", "pv-unlabelled"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(objs...)
			cfg := ControllerConfig{Provisioner: Config{DriverName: testDriver, Node: tc.node}}.withDefaults()
			inf := newControllerInformers(cfg, Clients{Work: client})
			// Consumers that ask the factory get the same informers.
			if inf.factory.Core().V1().PersistentVolumeClaims().Informer() != inf.claims ||
				inf.factory.Core().V1().PersistentVolumes().Informer() != inf.volumes {
				t.Fatal("the factory hands out other claim or PV informers than the controller's")
			}
			ctx, cancel := context.WithCancel(t.Context())
			inf.factory.Start(ctx.Done())
			defer inf.factory.Shutdown()
			defer cancel()
			inf.factory.WaitForCacheSync(ctx.Done())
			if got := names(inf.claims.GetStore()); !slices.Equal(got, tc.wantClaims) {
				t.Errorf("claims cached %v, want %v", got, tc.wantClaims)
			}
			if got := names(inf.volumes.GetStore()); !slices.Equal(got, tc.wantVolume) {
				t.Errorf("PVs cached %v, want %v", got, tc.wantVolume)
			}
			for _, a := range client.Actions() {
				if l, ok := a.(clienttesting.ListActionImpl); ok && tc.node.LabelSelection &&
					(l.Resource.Resource == "persistentvolumeclaims" || l.Resource.Resource == "persistentvolumes") &&
					l.ListRestrictions.Labels.Empty() {
					t.Errorf("%s listed without a label selector", l.Resource.Resource)
				}
			}
		})
	}
}

func names(s cache.Store) []string {
	var out []string
	for _, obj := range s.List() {
		out = append(out, obj.(metav1.Object).GetName())
	}
	slices.Sort(out)
	return out
}

// After a hand-back, the library writes its copy of the claim into the
// store. With selection by label, a claim that left the node's selection
// must not come back through that write: the watch's delete may already
// have been applied, and no later event would correct the store.
func TestLibraryWriteAfterHandBack(t *testing.T) {
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range []*storagev1.StorageClass{makeClass("wffc").StorageClass, makeClass("imm").Immediate().StorageClass} {
		if err := classes.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	lister := storagelisters.NewStorageClassLister(classes)
	for _, tc := range []struct {
		name      string
		immediate bool // the instance races for immediate-binding claims
		claim     *v1.PersistentVolumeClaim
		wantKept  bool
	}{
		{name: "handed-back WFFC claim", immediate: true, claim: makePVC("c", "wffc").PersistentVolumeClaim},
		{name: "handed-back immediate claim, instance races", immediate: true, claim: makePVC("c", "imm").PersistentVolumeClaim, wantKept: true},
		{name: "handed-back immediate claim, instance does not race", claim: makePVC("c", "imm").PersistentVolumeClaim},
		{name: "claim of this node", claim: makePVC("c", "wffc").withSelectedNode("node-1").PersistentVolumeClaim, wantKept: true},
		{name: "claim of another node", claim: makePVC("c", "wffc").withSelectedNode("node-2").PersistentVolumeClaim},
		{name: "claim of an unknown class", immediate: true, claim: makePVC("c", "gone").PersistentVolumeClaim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := &nodedeploy.Config{NodeName: "node-1", ImmediateBinding: tc.immediate, LabelSelection: true}
			inf := newReplayInformer(cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.PersistentVolumeClaim{}, 0, cache.Indexers{}), pendingClaim)
			inf.keep = nd.KeepAfterWrite(testDriver, lister)
			// The watch's delete came first: the store is empty when the
			// library writes its copy.
			if err := inf.GetStore().Update(tc.claim); err != nil {
				t.Fatal(err)
			}
			key, _ := cache.MetaNamespaceKeyFunc(tc.claim)
			_, kept, _ := inf.SharedIndexInformer.GetStore().GetByKey(key)
			if kept != tc.wantKept {
				t.Errorf("claim in the store after the library's write: %t, want %t", kept, tc.wantKept)
			}
		})
	}
}
