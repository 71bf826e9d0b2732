package provisioner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
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
	c.Finalizers = append(c.Finalizers, InFlightRecordFinalizer)
	return c
}

// TestRecordBeforeCreateVolume: the finalizer is written, from the API's
// answer, before the driver is asked; a claim gone, being deleted or bound
// gets no CreateVolume.
func TestRecordBeforeCreateVolume(t *testing.T) {
	class := makeClass("zonal").immediate().StorageClass
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
			if n := strings.Count(strings.Join(got.Finalizers, ","), InFlightRecordFinalizer); n != 1 {
				t.Errorf("claim finalizers %v, want %s once", got.Finalizers, InFlightRecordFinalizer)
			}
		})
	}
}

// TestClearVolume: the volume of a deleted claim is found by name and
// deleted; what cannot be learnt is abandoned with a reason.
func TestClearVolume(t *testing.T) {
	class := makeClass("zonal").immediate().StorageClass
	tests := []struct {
		name string
		// provision first: a volume of the claim's name exists.
		provision bool
		// class given to clearVolume (nil: deleted).
		class *storagev1.StorageClass
		// remember puts the request of the provision in memory.
		remember     bool
		full         bool
		want         clearOutcome
		wantVolumes  int
		wantInReason string
	}{
		{name: "volume exists, class exists", provision: true, class: class, want: clearDeleted},
		{name: "no volume, class exists: one is made and deleted", class: class, want: clearDeleted},
		{name: "no volume, no room: nothing exists", class: class, full: true, want: clearNone},
		{name: "class gone, request remembered", provision: true, remember: true, want: clearDeleted},
		{name: "class gone, nothing remembered", provision: true, want: clearAbandoned, wantVolumes: 1, wantInReason: "StorageClass is gone"},
		{name: "class now has other parameters", provision: true,
			class: makeClass("zonal").immediate().withParams("tier", "gold").StorageClass,
			want:  clearAbandoned, wantVolumes: 1, wantInReason: "other parameters"},
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
				e.p.records.remember(claim.UID, e.csi.lastCreate(t))
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

// newTestKeeper builds a record keeper over e's clientset with a fake event
// recorder.
func newTestKeeper(t *testing.T, e *env) (*inFlightRecordKeeper, *record.FakeRecorder) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(e.client, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	pvs := factory.Core().V1().PersistentVolumes()
	classes := factory.Storage().V1().StorageClasses()
	volumes, err := NewClaimVolumeIndex(pvs.Informer())
	if err != nil {
		t.Fatal(err)
	}
	k, err := newInFlightRecordKeeper(e.ctx, e.p, claims, volumes, classes.Lister(), e.client.CoreV1(), e.client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.watchVolumes(pvs.Informer()); err != nil {
		t.Fatal(err)
	}
	classes.Informer()
	ctx, cancel := context.WithCancel(e.ctx)
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	rec := record.NewFakeRecorder(10)
	k.recorder = rec
	return k, rec
}

// TestRecordKeeperSync: a deleted claim's record goes once its volume is
// deleted or its PV exists, never while a provision works on it.
func TestRecordKeeperSync(t *testing.T) {
	class := makeClass("zonal").immediate().StorageClass
	tests := []struct {
		name        string
		claim       *v1.PersistentVolumeClaim
		pv          bool
		pvUID       string
		busy        bool
		wantErr     error
		wantRecord  bool
		wantVolumes int
		wantEvent   string
	}{
		{name: "deleted, no PV: volume deleted", claim: makePVC("data", "zonal").deleting().withRecord().PersistentVolumeClaim,
			wantEvent: ReasonInFlightVolumeDeleted},
		{name: "deleted, PV exists: record moot", claim: makePVC("data", "zonal").deleting().withRecord().PersistentVolumeClaim,
			pv: true, wantVolumes: 1},
		{name: "deleted while provisioning: later", claim: makePVC("data", "zonal").deleting().withRecord().PersistentVolumeClaim,
			busy: true, wantErr: errRetryLater, wantRecord: true, wantVolumes: 1},
		{name: "not deleted, no PV: untouched", claim: makePVC("data", "zonal").withRecord().PersistentVolumeClaim,
			wantRecord: true, wantVolumes: 1},
		{name: "not deleted, PV exists: record removed, volume kept", claim: makePVC("data", "zonal").withRecord().PersistentVolumeClaim,
			pv: true, wantVolumes: 1},
		{name: "not deleted, PV of another claim of the name: untouched", claim: makePVC("data", "zonal").withRecord().PersistentVolumeClaim,
			pv: true, pvUID: "uid-old", wantRecord: true, wantVolumes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{tc.claim, class}
			if tc.pv {
				uid := types.UID("uid-data")
				if tc.pvUID != "" {
					uid = types.UID(tc.pvUID)
				}
				objs = append(objs, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-data"},
					Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: "data", UID: uid}}})
			}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, records: true, objs: objs})
			// A volume of the claim's name exists in the driver.
			if _, err := e.csi.ControllerClient.CreateVolume(e.ctx, &csi.CreateVolumeRequest{Name: "pvc-uid-data",
				CapacityRange:      &csi.CapacityRange{RequiredBytes: gi},
				VolumeCapabilities: []*csi.VolumeCapability{mountCapability()}, Parameters: map[string]string{}}); err != nil {
				t.Fatal(err)
			}
			k, rec := newTestKeeper(t, e)
			if tc.busy {
				defer e.p.records.enter("uid-data")()
			}
			err := k.sync(e.ctx, cache.ObjectName{Namespace: "apps", Name: "data"})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("sync: %v, want %v", err, tc.wantErr)
			}
			if got := HasInFlightFinalizer(e.claim(t, "apps", "data")); got != tc.wantRecord {
				t.Errorf("record present %t, want %t", got, tc.wantRecord)
			}
			if n := len(e.mock.Volumes()); n != tc.wantVolumes {
				t.Errorf("driver has %d volumes, want %d", n, tc.wantVolumes)
			}
			select {
			case ev := <-rec.Events:
				if tc.wantEvent == "" || !strings.Contains(ev, tc.wantEvent) {
					t.Errorf("event %q, want %q", ev, tc.wantEvent)
				}
			default:
				if tc.wantEvent != "" {
					t.Errorf("no event, want %s", tc.wantEvent)
				}
			}
		})
	}
}

// TestRecordKeeperQueuesClaimWithPV: a live claim's record is left alone
// while the claim has no PV, and goes as soon as the PV informer shows one
// that refers to the claim, so that bound claims do not keep the finalizer.
func TestRecordKeeperQueuesClaimWithPV(t *testing.T) {
	claim := makePVC("data", "zonal").withRecord().PersistentVolumeClaim
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, records: true,
		objs: []runtime.Object{claim, makeClass("zonal").immediate().StorageClass}})
	k, _ := newTestKeeper(t, e)
	if n := k.queue.Len(); n != 0 {
		t.Fatalf("%d claims queued before any PV, want 0", n)
	}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-data"},
		Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: "data", UID: "uid-data"}}}
	if _, err := e.client.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return k.queue.Len() == 1, nil
	}); err != nil {
		t.Fatalf("the claim was not queued when its PV appeared: %v", err)
	}
	k.next(e.ctx)
	if HasInFlightFinalizer(e.claim(t, "apps", "data")) {
		t.Error("the bound claim keeps the in-flight finalizer after its PV appeared")
	}
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
				t.Errorf("%d events, want one %s", len(rec.Events), ReasonVolumeNameTaken)
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
