package informercache

import (
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

func TestIndexHandlers(t *testing.T) {
	index := topology.NewIndex(testDriver)
	nodes := indexHandler(index.UpsertNode, index.DeleteNode)
	csiNodes := indexHandler(index.UpsertCSINode, index.DeleteCSINode)
	nodes.OnAdd(makeNode("a", "z1"), true)
	csiNodes.OnAdd(makeCSINode("a", zoneKey), true)
	nodes.OnUpdate(makeNode("a", "z1"), makeNode("a", "z2"))
	if got := index.Segments([]string{zoneKey}); len(got) != 1 || got[0][zoneKey] != "z2" {
		t.Fatalf("segments after update = %v, want z2", got)
	}
	nodes.OnAdd("not a node", false)
	nodes.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: makeNode("a", "z2")})
	if got := index.Segments([]string{zoneKey}); len(got) != 0 {
		t.Errorf("segments after tombstone delete = %v, want none", got)
	}
	csiNodes.OnDelete(makeCSINode("a", zoneKey))
	if got := index.KeySets(); len(got) != 0 {
		t.Errorf("key sets after CSINode delete = %v", got)
	}
}
