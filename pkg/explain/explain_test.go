package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

const (
	testDriver = "d.example.com"
	zoneKey    = "topology.d.example.com/zone"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func node(name, zone string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{zoneKey: zone}}}
}

func csiNode(name string, driver bool) *storagev1.CSINode {
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if driver {
		n.Spec.Drivers = []storagev1.CSINodeDriver{{Name: testDriver, NodeID: name, TopologyKeys: []string{zoneKey}}}
	}
	return n
}

func class(name string, zones ...string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: testDriver,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	if len(zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: zones}}}}
	}
	return sc
}

func claim(selected string) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "uid-data", Annotations: map[string]string{}},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast"), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}
	if selected != "" {
		c.Annotations[storagehelpers.AnnSelectedNode] = selected
	}
	return c
}

func leader(renewedAgo time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: contract.LeaderLeaseName(testDriver)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("p-1"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo)))}}
}

// failed is a ProvisioningFailed Event on claim ns/data with annotations
// given as key, value pairs (the contract.Ann* keys the provisioner sets).
func failed(msg string, annotations ...string) *v1.Event {
	ann := map[string]string{}
	for i := 0; i+1 < len(annotations); i += 2 {
		ann[annotations[i]] = annotations[i+1]
	}
	return &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data.1", Annotations: ann}, Reason: contract.ReasonProvisioningFailed, Type: v1.EventTypeWarning,
		Message:        msg,
		InvolvedObject: v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns", Name: "data", UID: "uid-data"},
		LastTimestamp:  metav1.NewTime(now.Add(-time.Minute)), Count: 2}
}

// cluster is three nodes (the driver on n1 in z1 and n2 in z2, not on n3
// in z3) and a fresh leader Lease, plus extra.
func cluster(extra ...runtime.Object) []runtime.Object {
	return clusterWith(leader(time.Second), extra...)
}

// clusterWith is cluster with another Lease (nil: none); a CSINode in
// extra replaces the default one of its node.
func clusterWith(lease *coordinationv1.Lease, extra ...runtime.Object) []runtime.Object {
	out := []runtime.Object{node("n1", "z1"), node("n2", "z2"), node("n3", "z3")}
	if lease != nil {
		out = append(out, lease)
	}
	csiNodes := map[string]runtime.Object{"n1": csiNode("n1", true), "n2": csiNode("n2", true), "n3": csiNode("n3", false)}
	for _, o := range extra {
		if n, ok := o.(*storagev1.CSINode); ok {
			csiNodes[n.Name] = n
			continue
		}
		out = append(out, o)
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		out = append(out, csiNodes[name])
	}
	return out
}

func TestCauses(t *testing.T) {
	bound := claim("")
	bound.Spec.VolumeName, bound.Status.Phase = "pv-1", v1.ClaimBound
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}}
	succeeded := failed("Successfully provisioned volume pv-1: selected node n1, segment zone=z1",
		contract.AnnPlacement, "selected node n1, segment zone=z1")
	succeeded.Reason, succeeded.Type = contract.ReasonProvisioningSucceeded, v1.EventTypeNormal
	cases := []struct {
		name    string
		objects []runtime.Object
		cause   Cause
		want    string
	}{
		{"bound", cluster(class("fast"), bound, pv, succeeded), CauseBound, "placed by: selected node n1, segment zone=z1"},
		{"class missing", cluster(claim("")), CauseClassNotFound, `class "fast" does not exist`},
		{"provisioner lease expired", clusterWith(leader(time.Minute), class("fast"), claim("n1")), CauseNoProvisioner, "no provisioner"},
		{"no driver on the selected node", cluster(class("fast"), claim("n3")), CauseNoDriverOnNode, "no driver d.example.com on node n3"},
		{"allowedTopologies match no node", cluster(class("fast", "z9"), claim("")), CauseNoAllowedSegment, "match no node"},
		{"bad class parameter", cluster(class("fast"), claim("n1"),
			failed(`failed to provision volume with StorageClass "fast": invalid StorageClass parameter: unknown key(s) csi.storage.k8s.io/fs-type`,
				contract.AnnRefusal, string(contract.RefusalInvalidParameter))),
			CauseBadClassParameter, "unknown key(s) csi.storage.k8s.io/fs-type"},
		{"missing secret", cluster(class("fast"), claim("n1"),
			failed(`failed to provision volume with StorageClass "fast": reading provisioner secret: secret ns/s1: secrets "s1" not found`,
				contract.AnnRefusal, string(contract.RefusalSecretNotFound), contract.AnnSecret, "ns/s1")),
			CauseMissingSecret, "ns/s1"},
		{"driver INVALID_ARGUMENT", cluster(class("fast"), claim("n1"),
			failed(`failed to provision volume with StorageClass "fast": rpc error: code = InvalidArgument desc = bad size`,
				contract.AnnDriverCode, "InvalidArgument")),
			CauseDriverInvalidArgument, "bad size"},
		{"attach limit reached", cluster(append(attachLimitReached(), class("fast"), claim(""))...), CauseAttachLimit,
			"attach limit reached on node n1"},
		{"waiting for a pod", cluster(class("fast"), claim("")), CauseWaitingForPod, "first consumer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			r, err := Claim(ctx, fake.NewClientset(tc.objects...), "ns", "data", Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := WriteText(&out, r); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			if r.Cause != tc.cause || !strings.Contains(r.Conclusion, tc.want) {
				t.Errorf("cause %s, conclusion %q; want %s containing %q\n%s", r.Cause, r.Conclusion, tc.cause, tc.want, out.String())
			}
		})
	}
}

// attachLimitReached gives n1 one attach slot, taken by pod "other"'s
// volume, and has pod "data" (mounting claim data) require zone z1 (n1).
func attachLimitReached() []runtime.Object {
	n1 := csiNode("n1", true)
	n1.Spec.Drivers[0].Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}
	other := claim("")
	other.Name, other.UID, other.Spec.VolumeName, other.Status.Phase = "other", "uid-other", "pv-other", v1.ClaimBound
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-other"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "h-other"}}}}
	mount := func(name, claim string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.PodSpec{
			Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
	}
	running := mount("o", "other")
	running.Spec.NodeName = "n1"
	pending := mount("data", "data")
	pending.Spec.NodeSelector = map[string]string{zoneKey: "z1"}
	return []runtime.Object{n1, other, pv, running, pending}
}

// TestReadOnly checks every request is a get or a list, and that a list RBAC
// refuses becomes a line naming the rule, not an error.
func TestReadOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(cluster(class("fast"), claim("n3"))...)
	client.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}, "", nil)
	})
	r, err := Claim(ctx, client, "ns", "data", Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" {
			t.Errorf("request %s %s: the explanation must only read", a.GetVerb(), a.GetResource().Resource)
		}
	}
	var out bytes.Buffer
	if err := WriteText(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `? access      could not list volumeattachments (cluster-wide, for the attach-limit count); allowed by the rule apiGroups: ["storage.k8s.io"], resources: ["volumeattachments"], verbs: ["list"]`) {
		t.Errorf("no line for the refused read:\n%s", out.String())
	}
	if r.Cause != CauseNoDriverOnNode {
		t.Errorf("cause %s, want %s despite the refused read", r.Cause, CauseNoDriverOnNode)
	}
}
