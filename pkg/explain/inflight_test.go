package explain

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// TestInFlightLineFindsPVByClaim: the claim's PV is found by the UID in its
// claimRef, whatever its name (the provisioner names PVs after their
// volumes, <--volume-name-prefix>-<UID cut to --volume-name-uuid-length>).
func TestInFlightLineFindsPVByClaim(t *testing.T) {
	withRecord := func() *v1.PersistentVolumeClaim {
		c := claim("n1")
		c.Finalizers = []string{contract.InFlightRecordFinalizer}
		return c
	}
	pvOf := func(name string, uid string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "ns", Name: "data", UID: types.UID(uid)}}}
	}
	cases := []struct {
		name    string
		objects []runtime.Object
		want    string
	}{
		{name: "record, PV of a prefixed name", objects: []runtime.Object{withRecord(), pvOf("k8s-uiddata", "uid-data")},
			want: "in-flight record present; the volume's PV k8s-uiddata exists"},
		{name: "no record, PV not bound yet", objects: []runtime.Object{claim("n1"), pvOf("k8s-uiddata", "uid-data")},
			want: "PV k8s-uiddata exists for the claim, not bound yet"},
		{name: "record, PV of an earlier claim of the name", objects: []runtime.Object{withRecord(), pvOf("k8s-uiddata", "uid-old")},
			want: "the volume has no PV yet"},
		{name: "record, no PV", objects: []runtime.Object{withRecord()}, want: "the volume has no PV yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			r, err := Claim(ctx, fake.NewClientset(cluster(append(tc.objects, class("fast"))...)...), "ns", "data", Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range r.Chain {
				if l.Step == "in-flight" {
					got = append(got, l.Text)
				}
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("in-flight lines %q, want one containing %q", got, tc.want)
			}
		})
	}
}
