package nodedeploy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// claimerEnv is a Claimer of node n1 on a fake API holding objs and the
// Node n1, its informers synced.
type claimerEnv struct {
	ctx    context.Context
	client *fake.Clientset
	cl     *Claimer
	// checked counts the calls of ClaimerConfig.Check.
	checked int
}

// newClaimerEnv: refusal is what the provisioner's check answers; before,
// when set, runs on the fake client before the informers start.
func newClaimerEnv(t *testing.T, nd *Config, refusal string, before func(*fake.Clientset, informers.SharedInformerFactory),
	objs ...runtime.Object) *claimerEnv {
	t.Helper()
	e := &claimerEnv{ctx: t.Context()}
	e.client = fake.NewClientset(append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{zoneKey: "z1"}}})...)
	factory := informers.NewSharedInformerFactory(e.client, 0)
	if before != nil {
		before(e.client, factory)
	}
	check := func(_ context.Context, _ *v1.PersistentVolumeClaim, _ *storagev1.StorageClass, node *v1.Node) string {
		e.checked++
		if node.Name != "n1" {
			t.Errorf("checked for node %q, want n1", node.Name)
		}
		return refusal
	}
	cl, err := NewClaimer(ClaimerConfig{Node: nd, DriverName: testDriver, Claims: factory.Core().V1().PersistentVolumeClaims().Informer(),
		Classes: factory.Storage().V1().StorageClasses().Lister(), Nodes: factory.Core().V1().Nodes().Lister(),
		Client: e.client.CoreV1(), Check: check})
	if err != nil {
		t.Fatal(err)
	}
	e.cl = cl
	factory.Start(e.ctx.Done())
	t.Cleanup(factory.Shutdown)
	factory.WaitForCacheSync(e.ctx.Done())
	return e
}

func (e *claimerEnv) claim(t *testing.T, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	c, err := e.client.CoreV1().PersistentVolumeClaims("apps").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The claimer of node n1 takes an immediate-binding claim only when the
// provisioner finds n1 can host it, and writes the selection conditioned on
// the claim's version.
func TestNodeClaimerAttempt(t *testing.T) {
	tests := []struct {
		name     string
		claim    *v1.PersistentVolumeClaim
		class    *storagev1.StorageClass
		refusal  string
		conflict bool
		wantNode string
		// wantChecked: the provisioner was asked.
		wantChecked bool
		wantTry     int
	}{
		{name: "unselected immediate claim taken", claim: makePVC("d", "imm").forDriver().PersistentVolumeClaim,
			class: makeClass("imm", true), wantNode: "n1", wantChecked: true},
		{name: "not left to the driver by the PV controller yet", claim: makePVC("d", "imm").PersistentVolumeClaim,
			class: makeClass("imm", true)},
		{name: "the provisioner refuses (zone, room, silent driver)", claim: makePVC("d", "imm").forDriver().PersistentVolumeClaim,
			class: makeClass("imm", true), refusal: "no room", wantChecked: true, wantTry: 1},
		{name: "delayed-binding class: the scheduler's business", claim: makePVC("d", "wffc").forDriver().PersistentVolumeClaim,
			class: makeClass("wffc", false)},
		{name: "already selected by another node", claim: makePVC("d", "imm").forDriver().withSelectedNode("n2").PersistentVolumeClaim,
			class: makeClass("imm", true), wantNode: "n2"},
		{name: "lost the race", claim: makePVC("d", "imm").forDriver().PersistentVolumeClaim,
			class: makeClass("imm", true), conflict: true, wantChecked: true, wantTry: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := func(client *fake.Clientset, _ informers.SharedInformerFactory) {
				if tc.conflict {
					client.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "d", errors.New("changed"))
					})
				}
			}
			e := newClaimerEnv(t, n1Deployment(), tc.refusal, before, tc.claim, tc.class)
			e.cl.attempt(e.ctx, cache.ObjectName{Namespace: "apps", Name: "d"})
			after := e.claim(t, "d")
			if got := after.Annotations[volume.AnnSelectedNode]; got != tc.wantNode {
				t.Errorf("selected node %q, want %q", got, tc.wantNode)
			}
			// Taking the claim labels it with the node in the same Update
			// (selection by label): it leaves the pool for this node.
			if got, taken := after.Labels[nodelabel.Key], tc.wantNode == "n1"; (got == nodelabel.NodeValue("n1")) != taken {
				t.Errorf("label %s=%q, want the node's value: %t", nodelabel.Key, got, taken)
			}
			if (e.checked > 0) != tc.wantChecked {
				t.Errorf("the provisioner was asked %d times, want asked: %t", e.checked, tc.wantChecked)
			}
			if got := e.cl.tries[tc.claim.UID]; got != tc.wantTry {
				t.Errorf("failed attempts %d, want %d", got, tc.wantTry)
			}
		})
	}
}

// The waits grow from a random share of BaseDelay to at most MaxDelay.
func TestNodeClaimerWait(t *testing.T) {
	cl := &Claimer{cfg: ClaimerConfig{Node: &Config{BaseDelay: time.Second, MaxDelay: 8 * time.Second}}, tries: map[types.UID]int{}}
	for range 50 {
		if d := cl.wait("a"); d < 0 || d > time.Second {
			t.Fatalf("first wait %s, want within [0, 1s]", d)
		}
	}
	for tries, max := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 10: 8 * time.Second, 100: 8 * time.Second} {
		cl.tries["a"] = tries
		for range 50 {
			if d := cl.wait("a"); d < max/2 || d > max {
				t.Fatalf("wait after %d failures %s, want within [%s, %s]", tries, d, max/2, max)
			}
		}
	}
}

// The node claimer takes an immediate-binding claim with one Update,
// conditioned on the resourceVersion it read, that writes the selected node
// and the node's label together, with selection by label (the claim leaves
// the pool's selection for the node's) and with selection of every claim
// alone (so that a cluster switched to label finds it labelled). The
// claim's other labels stay as they are.
func TestNodeClaimerUpdateCarriesNodeLabel(t *testing.T) {
	tests := []struct {
		name           string
		labelSelection bool
		labels         map[string]string
	}{
		{name: "selection by label: from the pool to the node", labelSelection: true,
			labels: map[string]string{nodelabel.Key: nodelabel.PoolValue(testDriver), "app": "db"}},
		{name: "selection of every claim: unlabelled claim", labelSelection: false},
		{name: "selection of every claim: other labels kept", labelSelection: false, labels: map[string]string{"app": "db"}},
		{name: "selection of every claim: stale pool label replaced", labelSelection: false,
			labels: map[string]string{nodelabel.Key: nodelabel.PoolValue(testDriver)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := makePVC("d", "imm").forDriver().PersistentVolumeClaim
			claim.Labels = tc.labels
			// The fake API keeps the version it is given (it sets none).
			claim.ResourceVersion = "7"
			nd := n1Deployment()
			nd.LabelSelection = tc.labelSelection
			var writes []k8stesting.Action
			before := func(client *fake.Clientset, factory informers.SharedInformerFactory) {
				client.PrependReactor("*", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
					switch a.GetVerb() {
					case "get", "list", "watch":
					default:
						writes = append(writes, a)
					}
					return false, nil, nil
				})
				if tc.labelSelection {
					nd.ScopeInformers(factory, testDriver)
				}
			}
			e := newClaimerEnv(t, nd, "", before, claim, makeClass("imm", true))
			if _, err := e.cl.claims.PersistentVolumeClaims("apps").Get("d"); err != nil {
				t.Fatalf("the claimer's informer does not hold the claim: %v", err)
			}
			e.cl.attempt(e.ctx, cache.ObjectName{Namespace: "apps", Name: "d"})

			if len(writes) != 1 || writes[0].GetVerb() != "update" || writes[0].GetSubresource() != "" {
				t.Fatalf("writes of the claim %v, want one Update", writes)
			}
			sent := writes[0].(k8stesting.UpdateAction).GetObject().(*v1.PersistentVolumeClaim)
			if sent.ResourceVersion != "7" {
				t.Errorf("Update conditioned on resourceVersion %q, want the one read, 7", sent.ResourceVersion)
			}
			if got := sent.Annotations[volume.AnnSelectedNode]; got != "n1" {
				t.Errorf("Update writes selected node %q, want n1", got)
			}
			want := map[string]string{nodelabel.Key: nodelabel.NodeValue("n1")}
			for k, v := range tc.labels {
				if k != nodelabel.Key {
					want[k] = v
				}
			}
			if diff := cmp.Diff(want, sent.Labels); diff != "" {
				t.Errorf("labels of the Update (-want +sent):\n%s", diff)
			}
			if got := e.claim(t, "d").Labels[nodelabel.Key]; got != nodelabel.NodeValue("n1") {
				t.Errorf("claim in the API labelled %s=%q, want %q", nodelabel.Key, got, nodelabel.NodeValue("n1"))
			}
		})
	}
}
