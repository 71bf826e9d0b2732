package provisioner

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakeclaims"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// kept gives a claim a finalizer and an annotation of others, which every
// write must keep.
func kept(c claimBuilder) claimBuilder {
	fakeclaims.MarkByOthers(c.PersistentVolumeClaim)
	return c
}

// TestRecordByUpdateWhenPatchRefused: under RBAC that grants update but not
// patch on claims, the record is written by UPDATE with the same safety: a
// claim gone, replaced, being deleted or bound gets no CreateVolume, and
// other finalizers and annotations stay.
func TestRecordByUpdateWhenPatchRefused(t *testing.T) {
	class := makeClass("zonal").Immediate().StorageClass
	bound := kept(makePVC("data", "zonal"))
	bound.Spec.VolumeName = "pvc-uid-data"
	replaced := kept(makePVC("data", "zonal"))
	replaced.UID = "uid-other"
	tests := []struct {
		name        string
		inAPI       *v1.PersistentVolumeClaim // nil: the claim is gone
		wantCreates int
	}{
		{name: "pending claim", inAPI: kept(makePVC("data", "zonal")).PersistentVolumeClaim, wantCreates: 1},
		{name: "claim already recorded", inAPI: kept(makePVC("data", "zonal").withRecord()).PersistentVolumeClaim, wantCreates: 1},
		{name: "claim gone"},
		{name: "claim replaced", inAPI: replaced.PersistentVolumeClaim},
		{name: "claim being deleted", inAPI: kept(makePVC("data", "zonal").deleting()).PersistentVolumeClaim},
		{name: "claim bound meanwhile", inAPI: bound.PersistentVolumeClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.inAPI != nil {
				objs = append(objs, tc.inAPI)
			}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, objs: objs, records: true})
			fakeclaims.EnforceResourceVersion(e.client, nil)
			calls := fakeclaims.WatchWrites(e.client, fakeclaims.Refusal("patch", true))
			// The library hands Provision the claim of its cache: pending,
			// at an older version.
			cached := makePVC("data", "zonal").PersistentVolumeClaim
			cached.ResourceVersion = "3"
			pv, _, err := e.provision(t, cached, class, nil)
			if got := len(e.csi.creates); got != tc.wantCreates {
				t.Fatalf("CreateVolume calls = %d, want %d (err %v)", got, tc.wantCreates, err)
			}
			if tc.inAPI != nil && calls.Updates.Load() == 0 {
				t.Errorf("no UPDATE of the claim after the PATCH was refused")
			}
			if tc.wantCreates == 0 {
				var ignored *controller.IgnoredError
				if !errors.As(err, &ignored) || pv != nil {
					t.Fatalf("Provision = %v, %v; want an IgnoredError", pv, err)
				}
				return
			}
			if err != nil || pv == nil {
				t.Fatalf("Provision: %v", err)
			}
			got := e.claim(t, "apps", "data")
			if n := strings.Count(strings.Join(got.Finalizers, ","), inflight.Finalizer); n != 1 || !hasString(got.Finalizers, "example.com/keep") {
				t.Errorf("claim finalizers %v, want %s once and example.com/keep", got.Finalizers, inflight.Finalizer)
			}
			if got.Annotations["example.com/keep"] != "yes" {
				t.Errorf("claim annotations %v, want example.com/keep kept", got.Annotations)
			}
		})
	}
}

// TestGuardRescheduleByUpdateWhenPatchRefused: the library's reschedule of
// a claim whose record changed its version is an UPDATE of the API's
// current claim where RBAC refuses the PATCH: no conflict, nothing of the
// newer claim lost.
func TestGuardRescheduleByUpdateWhenPatchRefused(t *testing.T) {
	e := newEnv(t, envOptions{nodes: threeZones, records: true,
		objs: []runtime.Object{kept(makePVC("data", "zonal").withRecord().withSelectedNode("n1")).PersistentVolumeClaim}})
	fakeclaims.EnforceResourceVersion(e.client, nil)
	fakeclaims.WatchWrites(e.client, fakeclaims.Refusal("patch", true))
	client := withRecordGuard(e.client, e.p, record.NewFakeRecorder(1))
	stale := makePVC("data", "zonal").PersistentVolumeClaim
	stale.ResourceVersion = "1"
	if _, err := client.CoreV1().PersistentVolumeClaims("apps").Update(e.ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.claim(t, "apps", "data")
	if _, ok := got.Annotations[annSelectedNode]; ok {
		t.Error("selected-node still set")
	}
	if !inflight.HasFinalizer(got) || got.Annotations["example.com/keep"] != "yes" {
		t.Errorf("the newer claim's record or annotation lost: %v %v", got.Finalizers, got.Annotations)
	}
}
