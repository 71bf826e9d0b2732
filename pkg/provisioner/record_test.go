package provisioner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

func (e *env) claim(t *testing.T, ns, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	c, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) volumeNames() []string {
	var out []string
	for _, v := range e.mock.Volumes() {
		out = append(out, v.Name)
	}
	return out
}

func (c claimBuilder) deleting() claimBuilder {
	now := metav1.Now()
	c.DeletionTimestamp = &now
	c.Finalizers = append(c.Finalizers, "kubernetes.io/pvc-protection")
	return c
}

func (c claimBuilder) withRecord() claimBuilder {
	c.Finalizers = append(c.Finalizers, inflight.Finalizer)
	return c
}

// TestRecordBeforeCreateVolume: the finalizer is written, from the API's
// answer, before the driver is asked; a claim gone, being deleted or bound
// gets no CreateVolume.
func TestRecordBeforeCreateVolume(t *testing.T) {
	class := makeClass("zonal").Immediate().StorageClass
	tests := []struct {
		name        string
		inAPI       *v1.PersistentVolumeClaim // nil: the claim is gone
		wantCreates int
	}{
		{name: "pending claim", inAPI: makePVC("data", "zonal").PersistentVolumeClaim, wantCreates: 1},
		{name: "claim already recorded", inAPI: makePVC("data", "zonal").withRecord().PersistentVolumeClaim, wantCreates: 1},
		{name: "claim gone", wantCreates: 0},
		{name: "claim being deleted", inAPI: makePVC("data", "zonal").deleting().PersistentVolumeClaim, wantCreates: 0},
		{name: "claim bound meanwhile", inAPI: func() *v1.PersistentVolumeClaim {
			c := makePVC("data", "zonal").PersistentVolumeClaim
			c.Spec.VolumeName = "pvc-uid-data"
			return c
		}(), wantCreates: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.inAPI != nil {
				objs = append(objs, tc.inAPI)
			}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, objs: objs, records: true})
			patchedBeforeCreate := false
			e.client.PrependReactor("patch", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
				e.csi.mu.Lock()
				patchedBeforeCreate = len(e.csi.creates) == 0
				e.csi.mu.Unlock()
				return false, nil, nil
			})
			// The library hands Provision the claim of its cache: pending.
			pv, _, err := e.provision(t, makePVC("data", "zonal").PersistentVolumeClaim, class, nil)
			if got := len(e.csi.creates); got != tc.wantCreates {
				t.Fatalf("CreateVolume calls = %d, want %d (err %v)", got, tc.wantCreates, err)
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
			if !patchedBeforeCreate {
				t.Error("the claim was not patched before CreateVolume")
			}
			got := e.claim(t, "apps", "data")
			if n := strings.Count(strings.Join(got.Finalizers, ","), inflight.Finalizer); n != 1 {
				t.Errorf("claim finalizers %v, want %s once", got.Finalizers, inflight.Finalizer)
			}
		})
	}
}

// TestClearVolume: the volume of a deleted claim is found by name and
// deleted; what cannot be learnt is abandoned with a reason.
func TestClearVolume(t *testing.T) {
	class := makeClass("zonal").Immediate().StorageClass
	tests := []struct {
		name string
		// provision first: a volume of the claim's name exists.
		provision bool
		// class given to clearVolume (nil: deleted).
		class *storagev1.StorageClass
		// remember puts the request of the provision in memory.
		remember     bool
		full         bool
		want         inflight.Outcome
		wantVolumes  int
		wantInReason string
	}{
		{name: "volume exists, class exists", provision: true, class: class, want: inflight.OutcomeDeleted},
		{name: "no volume, class exists: one is made and deleted", class: class, want: inflight.OutcomeDeleted},
		{name: "no volume, no room: nothing exists", class: class, full: true, want: inflight.OutcomeNothingCreated},
		{name: "class gone, request remembered", provision: true, remember: true, want: inflight.OutcomeDeleted},
		{name: "class gone, nothing remembered", provision: true, want: inflight.OutcomeAbandoned, wantVolumes: 1, wantInReason: "StorageClass is gone"},
		{name: "class now has other parameters", provision: true,
			class: makeClass("zonal").Immediate().WithParams("tier", "gold").StorageClass,
			want:  inflight.OutcomeAbandoned, wantVolumes: 1, wantInReason: "other parameters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, records: true,
				objs: []runtime.Object{makePVC("data", "zonal").PersistentVolumeClaim}})
			claim := makePVC("data", "zonal").PersistentVolumeClaim
			if tc.provision {
				if _, _, err := e.provision(t, claim, class, nil); err != nil {
					t.Fatal(err)
				}
			}
			if tc.remember {
				if err := e.p.records.Open(e.ctx, claim, e.csi.lastCreate(t)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.full {
				for _, z := range []string{"z1", "z2", "z3"} {
					if err := e.mock.SetCapacity(map[string]string{"zone": z}, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, detail, err := e.p.clearVolume(e.ctx, claim, tc.class)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("outcome %q (%s), want %q", got, detail, tc.want)
			}
			if !strings.Contains(detail, tc.wantInReason) {
				t.Errorf("detail %q lacks %q", detail, tc.wantInReason)
			}
			if n := len(e.mock.Volumes()); n != tc.wantVolumes {
				t.Errorf("driver has %d volumes %v, want %d", n, e.volumeNames(), tc.wantVolumes)
			}
			for _, r := range e.csi.creates[min(1, len(e.csi.creates)):] {
				if r.AccessibilityRequirements != nil {
					t.Errorf("clearing CreateVolume has requirements %v", r.AccessibilityRequirements)
				}
			}
		})
	}
}

// startRecordKeeper runs the record keeper of e's provisioner, as the
// Controller wires it, on informers of e's clientset, until the test ends.
func startRecordKeeper(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(e.client, 0)
	pvs := factory.Core().V1().PersistentVolumes().Informer()
	volumes, err := NewClaimVolumeIndex(pvs)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := newRecordKeeper(ctx, e.p, factory.Core().V1().PersistentVolumeClaims().Informer(), volumes, e.client, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WatchVolumes(pvs); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go k.Run(ctx)
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// TestGuardAlreadyExists: a PV create that finds the name taken keeps the
// new volume only when the existing PV holds it for the same claim.
func TestGuardAlreadyExists(t *testing.T) {
	mine := func(handle string, deleting bool) *v1.PersistentVolume {
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-data"}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle}},
			ClaimRef:               &v1.ObjectReference{Namespace: "apps", Name: "data", UID: "uid-data"}}}
		if deleting {
			now := metav1.Now()
			pv.DeletionTimestamp = &now
			pv.Finalizers = []string{"hold"}
		}
		return pv
	}
	tests := []struct {
		name        string
		existing    *v1.PersistentVolume
		wantDeleted bool
	}{
		{name: "our PV", existing: mine("vol-new", false)},
		{name: "PV of another volume", existing: mine("vol-old", false), wantDeleted: true},
		{name: "our handle, PV being deleted", existing: mine("vol-new", true), wantDeleted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, records: true,
				objs: []runtime.Object{tc.existing}})
			rec := record.NewFakeRecorder(10)
			client := withRecordGuard(e.client, e.p, rec)
			_, err := client.CoreV1().PersistentVolumes().Create(e.ctx, mine("vol-new", false), metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				t.Fatalf("Create: %v, want AlreadyExists (the library's 'saved')", err)
			}
			deleted := slices.ContainsFunc(e.csi.deletes, func(r *csi.DeleteVolumeRequest) bool { return r.VolumeId == "vol-new" })
			if deleted != tc.wantDeleted {
				t.Errorf("new volume deleted %t, want %t", deleted, tc.wantDeleted)
			}
			if tc.wantDeleted && len(rec.Events) != 1 {
				t.Errorf("%d events, want one %s", len(rec.Events), inflight.ReasonVolumeNameTaken)
			}
			// The library's ProvisioningSucceeded Event of a deleted
			// volume is dropped (see trimmedEvents).
			if d, _ := e.p.deps.Decisions.Take("uid-data"); d.VolumeDeleted != tc.wantDeleted {
				t.Errorf("decision %+v, want VolumeDeleted %t", d, tc.wantDeleted)
			}
		})
	}
}

// TestGuardRescheduleIsPatch: the library's claim update of a reschedule
// becomes a patch of the annotation alone, so a stale resourceVersion does
// not conflict.
func TestGuardRescheduleIsPatch(t *testing.T) {
	e := newEnv(t, envOptions{nodes: threeZones, records: true,
		objs: []runtime.Object{makePVC("data", "zonal").withSelectedNode("n1").PersistentVolumeClaim}})
	client := withRecordGuard(e.client, e.p, record.NewFakeRecorder(1))
	stale := makePVC("data", "zonal").PersistentVolumeClaim
	stale.ResourceVersion = "1"
	if _, err := client.CoreV1().PersistentVolumeClaims("apps").Update(e.ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.claim(t, "apps", "data").Annotations[annSelectedNode]; ok {
		t.Error("selected-node still set")
	}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("claim updated (%v), want a patch", a)
		}
	}
}
