package provisioner

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

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
			claim := makePVC("d", "imm").PersistentVolumeClaim
			claim.Labels = tc.labels
			// The fake API keeps the version it is given (it sets none).
			claim.ResourceVersion = "7"
			claim.Annotations = map[string]string{annStorageProvisioner: testDriver}
			node := n1Deployment()
			node.LabelSelection = tc.labelSelection
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, Node: node}, nodes: threeZones, records: true,
				objs: []runtime.Object{claim, makeClass("imm").immediate().StorageClass}})
			before := e.claim(t, "apps", "d")

			var writes []k8stesting.Action
			e.client.PrependReactor("*", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
				switch a.GetVerb() {
				case "get", "list", "watch":
				default:
					writes = append(writes, a)
				}
				return false, nil, nil
			})
			factory := informers.NewSharedInformerFactory(e.client, 0)
			if tc.labelSelection {
				e.p.cfg.Node.registerScopedInformers(factory, testDriver)
			}
			claims := factory.Core().V1().PersistentVolumeClaims().Informer()
			cl, err := newNodeClaimer(e.p.cfg.Node, e.p, claims, factory.Storage().V1().StorageClasses().Lister(),
				factory.Core().V1().Nodes().Lister(), e.client.CoreV1(), false)
			if err != nil {
				t.Fatal(err)
			}
			factory.Start(e.ctx.Done())
			factory.WaitForCacheSync(e.ctx.Done())
			if _, err := cl.claims.PersistentVolumeClaims("apps").Get("d"); err != nil {
				t.Fatalf("the claimer's informer does not hold the claim: %v", err)
			}
			cl.attempt(e.ctx, cache.ObjectName{Namespace: "apps", Name: "d"})

			if len(writes) != 1 || writes[0].GetVerb() != "update" || writes[0].GetSubresource() != "" {
				t.Fatalf("writes of the claim %v, want one Update", writes)
			}
			sent := writes[0].(k8stesting.UpdateAction).GetObject().(*v1.PersistentVolumeClaim)
			if sent.ResourceVersion != "7" || before.ResourceVersion != "7" {
				t.Errorf("Update conditioned on resourceVersion %q, want the one read, %q", sent.ResourceVersion, before.ResourceVersion)
			}
			if got := sent.Annotations[annSelectedNode]; got != "n1" {
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
			if got := e.claim(t, "apps", "d").Labels[nodelabel.Key]; got != nodelabel.NodeValue("n1") {
				t.Errorf("claim in the API labelled %s=%q, want %q", nodelabel.Key, got, nodelabel.NodeValue("n1"))
			}
		})
	}
}
