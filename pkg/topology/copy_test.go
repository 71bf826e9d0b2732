package topology

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func affinityOf(terms ...v1.NodeSelectorTerm) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}
}

func exprTerm(reqs ...v1.NodeSelectorRequirement) v1.NodeSelectorTerm {
	return v1.NodeSelectorTerm{MatchExpressions: reqs}
}

// localKeys: node n1 and n2 register the driver with the node key
// "example.com/node" (a node-local driver's convention) and a zone.
func localKeys(node string) ([]string, bool) {
	switch node {
	case "n1", "n2":
		return []string{"example.com/node", "zone"}, true
	}
	return nil, false
}

func TestNodeBound(t *testing.T) {
	byName := v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}}}}
	for _, tc := range []struct {
		name     string
		affinity *v1.VolumeNodeAffinity
		keys     NodeKeys
		want     bool
	}{
		{"no affinity", nil, localKeys, false},
		{"no required terms", &v1.VolumeNodeAffinity{}, localKeys, false},
		{"zone", affinityOf(exprTerm(in("zone", "z1"))), localKeys, false},
		{"hostname", affinityOf(exprTerm(in(v1.LabelHostname, "n1"))), nil, true},
		{"hostname and zone", affinityOf(exprTerm(in("zone", "z1"), in(v1.LabelHostname, "n1"))), nil, true},
		{"hostname, two values", affinityOf(exprTerm(in(v1.LabelHostname, "n1", "n2"))), nil, false},
		{"match fields", affinityOf(byName), nil, true},
		{"driver node key naming a node", affinityOf(exprTerm(in("example.com/node", "n1"))), localKeys, true},
		{"driver node key, no CSINode lookup", affinityOf(exprTerm(in("example.com/node", "n1"))), nil, false},
		{"key naming a node, not the driver's key there", affinityOf(exprTerm(in("rack", "n1"))), localKeys, false},
		{"driver key whose value is no node", affinityOf(exprTerm(in("zone", "z1"))), localKeys, false},
		{"replicated on two named nodes", affinityOf(exprTerm(in(v1.LabelHostname, "n1")), exprTerm(in(v1.LabelHostname, "n2"))), nil, true},
		{"one term names a node, the other a zone", affinityOf(exprTerm(in(v1.LabelHostname, "n1")), exprTerm(in("zone", "z2"))), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeBound(tc.affinity, tc.keys); got != tc.want {
				t.Errorf("NodeBound = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCopyReach(t *testing.T) {
	zonal := affinityOf(exprTerm(in("zone", "z1")))
	local := affinityOf(exprTerm(in("zone", "z1"), in(v1.LabelHostname, "n1")))
	for _, tc := range []struct {
		name      string
		copy      Copy
		wantReach *v1.VolumeNodeAffinity
		wantBasis CopyBasis
	}{
		{"clone of a zonal volume", Copy{Affinity: zonal, Placement: CopyAuto}, zonal, BasisClone},
		{"clone of a node-bound volume", Copy{Affinity: local, Placement: CopyAuto}, local, BasisClone},
		{"restore of a zonal volume: anywhere, as upstream", Copy{Restore: true, Affinity: zonal, Placement: CopyAuto}, nil, BasisAnywhere},
		{"restore of a node-bound volume: its node", Copy{Restore: true, Affinity: local, Placement: CopyAuto}, local, BasisNodeBound},
		{"restore without a known source volume", Copy{Restore: true, Placement: CopyAuto}, nil, BasisAnywhere},
		{"class says source: restore of a zonal volume", Copy{Restore: true, Affinity: zonal, Placement: CopyNearSource}, zonal, BasisClass},
		{"class says source: clone", Copy{Affinity: zonal, Placement: CopyNearSource}, zonal, BasisClass},
		{"class says anywhere: restore of a node-bound volume", Copy{Restore: true, Affinity: local, Placement: CopyAnywhere}, nil, BasisAnywhere},
		{"class says anywhere: clone", Copy{Affinity: zonal, Placement: CopyAnywhere}, nil, BasisAnywhere},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reach, basis := CopyReach(tc.copy, localKeys)
			if diff := cmp.Diff(tc.wantReach, reach.Affinity); diff != "" {
				t.Errorf("reach (-want +got):\n%s", diff)
			}
			if basis != tc.wantBasis {
				t.Errorf("basis %q, want %q", basis, tc.wantBasis)
			}
		})
	}
}

func TestClassCopyPlacement(t *testing.T) {
	class := func(v string, set bool) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
		if set {
			c.Annotations = map[string]string{AnnCopyPlacement: v}
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		class   *storagev1.StorageClass
		want    CopyPlacement
		wantErr bool
	}{
		{"no class", nil, CopyAuto, false},
		{"no annotation", class("", false), CopyAuto, false},
		{"empty", class("", true), CopyAuto, false},
		{"auto", class("auto", true), CopyAuto, false},
		{"source", class("source", true), CopyNearSource, false},
		{"anywhere", class("anywhere", true), CopyAnywhere, false},
		{"unknown", class("zone", true), CopyAuto, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClassCopyPlacement(tc.class)
			if got != tc.want || errors.Is(err, ErrInvalidCopyPlacement) != tc.wantErr {
				t.Errorf("ClassCopyPlacement = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestCSINodeKeys(t *testing.T) {
	nodes := map[string]*storagev1.CSINode{"n1": makeCSINode("n1", "d", "example.com/node"), "n2": makeCSINode("n2", "other", "zone")}
	keys := CSINodeKeys(func(name string) *storagev1.CSINode { return nodes[name] }, "d")
	for _, tc := range []struct {
		name, node string
		want       []string
		wantOK     bool
	}{
		{"registered", "n1", []string{"example.com/node"}, true},
		{"another driver", "n2", nil, false},
		{"no CSINode", "n3", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := keys(tc.node)
			if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.wantOK {
				t.Errorf("keys(%q) = %v, %v; want %v, %v", tc.node, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
