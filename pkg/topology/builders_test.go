package topology

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testobjects"
)

const (
	testDriver = "mock.csi.example.com"
	zoneKey    = "topology.mock.csi.example.com/zone"
	rackKey    = "topology.mock.csi.example.com/rack"
	hostKey    = "topology.mock.csi.example.com/hostname"
	// poolKey is a node label that is not a driver topology key.
	poolKey = "example.com/pool"
)

// term builds a TopologySelectorTerm from key, values... pairs.
func term(exprs ...v1.TopologySelectorLabelRequirement) v1.TopologySelectorTerm {
	return v1.TopologySelectorTerm{MatchLabelExpressions: exprs}
}

func expr(key string, values ...string) v1.TopologySelectorLabelRequirement {
	return v1.TopologySelectorLabelRequirement{Key: key, Values: values}
}

func makeNode(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func makeCSINode(name, driver string, keys ...string) *storagev1.CSINode {
	return testobjects.CSINode(name, driver, keys...)
}

func seg(kv ...string) Segment {
	s := Segment{}
	for i := 0; i+1 < len(kv); i += 2 {
		s[kv[i]] = kv[i+1]
	}
	return s
}

// nodeLabels builds a label map from key, value pairs.
func nodeLabels(kv ...string) map[string]string {
	return map[string]string(seg(kv...))
}

func csiTopo(segs ...Segment) []*csi.Topology {
	return toCSI(segs)
}

// zonalIndex returns an index with nodes n-<zone>-<i> in the given zones.
func zonalIndex(zones []string, perZone int) *Index {
	idx := NewIndex(testDriver)
	for _, z := range zones {
		for i := 0; i < perZone; i++ {
			name := "n-" + z + "-" + string(rune('a'+i%26)) + itoa(i)
			idx.UpsertNode(makeNode(name, map[string]string{zoneKey: z}))
			idx.UpsertCSINode(makeCSINode(name, testDriver, zoneKey))
		}
	}
	return idx
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
