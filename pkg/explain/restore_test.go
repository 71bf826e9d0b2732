package explain

import (
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// restoreWorld: claim "data" restores snapshot "snap" of claim "src",
// bound to pv-src with affinity; a pod using "data" requires node n2 (z2).
func restoreWorld(affinity *v1.VolumeNodeAffinity, placement string) []runtime.Object {
	sc := class("fast")
	if placement != "" {
		sc.Annotations = map[string]string{topology.AnnCopyPlacement: placement}
	}
	data := claim("")
	data.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: ptr.To(snapv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}
	src := claim("")
	src.Name, src.UID, src.Spec.VolumeName, src.Status.Phase = "src", "uid-src", "pv-src", v1.ClaimBound
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-src"}, Spec: v1.PersistentVolumeSpec{NodeAffinity: affinity,
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "h"}}}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Spec: v1.PodSpec{
		NodeSelector: map[string]string{zoneKey: "z2"},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	return cluster(sc, data, src, pv, pod)
}

func restoreAffinity(exprs ...v1.NodeSelectorRequirement) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: exprs}}}}
}

// Explain judges a restore by the rule csi-provisioner and the filter
// follow: a snapshot of a zonal volume restores anywhere (the pod's z2
// node is fine), one of a node-bound volume only on its node (the pod's
// node is out of reach), and the class's annotation overrides both.
func TestRestoreSource(t *testing.T) {
	zonal := restoreAffinity(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}})
	local := restoreAffinity(v1.NodeSelectorRequirement{Key: zoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}},
		v1.NodeSelectorRequirement{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"n1"}})
	snap := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"},
		Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("src")}}}
	for _, tc := range []struct {
		name      string
		affinity  *v1.VolumeNodeAffinity
		placement string
		noSnap    bool
		wantLine  string
		wantOut   bool // CauseSourceOutOfReach
	}{
		{name: "zonal volume: anywhere", affinity: zonal, wantLine: "pass restores VolumeSnapshot snap of claim src (PV pv-src, reachable from " + zoneKey + " in (z1)): the copy may be made anywhere"},
		{name: "node-bound volume: its node", affinity: local, wantOut: true,
			wantLine: "pass restores VolumeSnapshot snap of claim src, reachable from " + zoneKey + " in (z1), kubernetes.io/hostname in (n1) (the snapshot was taken of a node-bound volume"},
		{name: "zonal volume, class keeps copies near", affinity: zonal, placement: "source", wantOut: true, wantLine: "keeps copies near their source): allowed segment(s) " + zoneKey + "=z1"},
		{name: "node-bound volume, class places copies anywhere", affinity: local, placement: "anywhere", wantLine: "the copy may be made anywhere"},
		{name: "snapshot missing", affinity: zonal, noSnap: true, wantLine: "fail restores VolumeSnapshot snap, which does not exist in ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			snaps := snapfake.NewSimpleClientset()
			if !tc.noSnap {
				snaps = snapfake.NewSimpleClientset(snap)
			}
			r, err := Claim(ctx, fake.NewClientset(restoreWorld(tc.affinity, tc.placement)...), "ns", "data", Options{Now: now, Snapshots: snaps})
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range r.Chain {
				if l.Step == "source" {
					lines = append(lines, string(l.State)+" "+l.Text)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.wantLine) {
				t.Errorf("source lines %q, want one with %q", lines, tc.wantLine)
			}
			if out := r.Cause == CauseSourceOutOfReach; out != tc.wantOut {
				t.Errorf("cause %s (%s), want SourceOutOfReach: %v", r.Cause, r.Conclusion, tc.wantOut)
			}
		})
	}
}
