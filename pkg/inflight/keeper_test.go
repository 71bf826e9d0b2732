package inflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
)

// keeperEnv is a Keeper on a fake clientset, with its informers synced.
type keeperEnv struct {
	ctx     context.Context
	client  *fake.Clientset
	records *Records
	volumes *fakeVolumes
	keeper  *Keeper
	events  *record.FakeRecorder
}

func newKeeperEnv(t *testing.T, volumes *fakeVolumes, objs ...runtime.Object) *keeperEnv {
	t.Helper()
	return newKeeperEnvWith(t, nil, volumes, objs...)
}

// newKeeperEnvWith is newKeeperEnv with edit applied to the keeper's
// configuration (when not nil).
func newKeeperEnvWith(t *testing.T, edit func(*KeeperConfig), volumes *fakeVolumes, objs ...runtime.Object) *keeperEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	watching := fakewatch.Opened(t, &client.Fake, "persistentvolumeclaims", "persistentvolumes")
	factory := informers.NewSharedInformerFactory(client, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	pvs := factory.Core().V1().PersistentVolumes().Informer()
	records := NewRecords(Config{Claims: client.CoreV1()})
	events := record.NewFakeRecorder(10)
	cfg := KeeperConfig{Records: records, Volumes: volumes, Claims: claims, ClaimVolumes: storePVs{pvs},
		Recorder: events, DriverName: "test.csi.example.com"}
	if edit != nil {
		edit(&cfg)
	}
	k, err := NewKeeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WatchVolumes(pvs); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	watching()
	return &keeperEnv{ctx: ctx, client: client, records: records, volumes: volumes, keeper: k, events: events}
}

func (e *keeperEnv) claim(t *testing.T, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	c, err := e.client.CoreV1().PersistentVolumeClaims("apps").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRecordKeeperSync: a deleted claim's record goes once its volume is
// deleted or its PV exists, never while a provision works on it.
func TestRecordKeeperSync(t *testing.T) {
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
		{name: "deleted, no PV: volume deleted", claim: makeClaim("data").deleting().withRecord().PersistentVolumeClaim,
			wantEvent: ReasonInFlightVolumeDeleted},
		{name: "deleted, PV exists: record moot", claim: makeClaim("data").deleting().withRecord().PersistentVolumeClaim,
			pv: true, wantVolumes: 1},
		{name: "deleted while provisioning: later", claim: makeClaim("data").deleting().withRecord().PersistentVolumeClaim,
			busy: true, wantErr: errRetryLater, wantRecord: true, wantVolumes: 1},
		{name: "not deleted, no PV: untouched", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			wantRecord: true, wantVolumes: 1},
		{name: "not deleted, PV exists: record removed, volume kept", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			pv: true, wantVolumes: 1},
		{name: "not deleted, PV of another claim of the name: untouched", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			pv: true, pvUID: "uid-old", wantRecord: true, wantVolumes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{tc.claim}
			if tc.pv {
				uid := types.UID("uid-data")
				if tc.pvUID != "" {
					uid = types.UID(tc.pvUID)
				}
				objs = append(objs, pvOf("pvc-uid-data", "data", uid))
			}
			// A volume of the claim's name exists in the driver.
			e := newKeeperEnv(t, newFakeVolumes("pvc-uid-data"), objs...)
			if tc.busy {
				defer e.records.Enter("uid-data")()
			}
			err := e.keeper.sync(e.ctx, cache.ObjectName{Namespace: "apps", Name: "data"})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("sync: %v, want %v", err, tc.wantErr)
			}
			if got := HasFinalizer(e.claim(t, "data")); got != tc.wantRecord {
				t.Errorf("record present %t, want %t", got, tc.wantRecord)
			}
			if n := e.volumes.count(); n != tc.wantVolumes {
				t.Errorf("driver has %d volumes, want %d", n, tc.wantVolumes)
			}
			select {
			case ev := <-e.events.Events:
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
	e := newKeeperEnv(t, newFakeVolumes("pvc-uid-data"), makeClaim("data").withRecord().PersistentVolumeClaim)
	if n := e.keeper.queue.Len(); n != 0 {
		t.Fatalf("%d claims queued before any PV, want 0", n)
	}
	if _, err := e.client.CoreV1().PersistentVolumes().Create(e.ctx, pvOf("pvc-uid-data", "data", "uid-data"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return e.keeper.queue.Len() == 1, nil
	}); err != nil {
		t.Fatalf("the claim was not queued when its PV appeared: %v", err)
	}
	e.keeper.next(e.ctx)
	if HasFinalizer(e.claim(t, "data")) {
		t.Error("the bound claim keeps the in-flight finalizer after its PV appeared")
	}
	if n := e.volumes.count(); n != 1 {
		t.Errorf("driver has %d volumes, want the claim's volume kept", n)
	}
}

// TestRecordKeeperLeavesTheRecordToTheBinder: with BinderGrace, the record
// of a live claim that is not bound yet stays for bind-through's binding
// write until the grace from its PV's creation ends, and the claim comes
// back to the keeper then; a bound claim's, and any claim's after the
// grace, goes at once.
func TestRecordKeeperLeavesTheRecordToTheBinder(t *testing.T) {
	const grace = 300 * time.Millisecond
	boundClaim := makeClaim("data").withRecord().PersistentVolumeClaim
	boundClaim.Spec.VolumeName = "pvc-uid-data"
	tests := []struct {
		name  string
		claim *v1.PersistentVolumeClaim
		pvAge time.Duration
		// sent: the PV as its creator sent it, without a creation time.
		sent       bool
		wantRecord bool
	}{
		{name: "unbound, PV just created: left to the binder", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			wantRecord: true},
		{name: "unbound, PV as sent, without a creation time: left to the binder", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			sent: true, wantRecord: true},
		{name: "unbound, PV older than the grace: removed", claim: makeClaim("data").withRecord().PersistentVolumeClaim,
			pvAge: time.Minute},
		{name: "bound by the PV controller, PV just created: removed", claim: boundClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pv := pvOf("pvc-uid-data", "data", "uid-data")
			pv.CreationTimestamp = metav1.NewTime(time.Now().Add(-tc.pvAge))
			if tc.sent {
				pv.CreationTimestamp = metav1.Time{}
			}
			e := newKeeperEnvWith(t, func(c *KeeperConfig) { c.BinderGrace = grace }, newFakeVolumes("pvc-uid-data"), tc.claim, pv)
			// Drop what the informers' add events queued.
			for e.keeper.queue.Len() > 0 {
				key, _ := e.keeper.queue.Get()
				e.keeper.queue.Done(key)
			}
			e.client.ClearActions()
			if err := e.keeper.sync(e.ctx, cache.ObjectName{Namespace: "apps", Name: "data"}); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if got := HasFinalizer(e.claim(t, "data")); got != tc.wantRecord {
				t.Fatalf("record present %t, want %t", got, tc.wantRecord)
			}
			if !tc.wantRecord {
				return
			}
			for _, a := range e.client.Actions() {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
					t.Errorf("%s %s while the record is left to the binder, want no write", v, a.GetResource().Resource)
				}
			}
			if tc.sent {
				// Its age counts from the API's copy, which this
				// informer never gets.
				return
			}
			// The claim comes back when the grace ends (no informer event
			// comes any more), and the keeper removes the record the
			// binder did not, not before.
			if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				if e.keeper.queue.Len() > 0 {
					e.keeper.next(e.ctx)
				}
				return !HasFinalizer(e.claim(t, "data")), nil
			}); err != nil {
				t.Fatalf("the record stays after the grace: %v", err)
			}
			if age := time.Since(pv.CreationTimestamp.Time); age < grace {
				t.Errorf("record removed %v after the PV's creation, before the grace of %v", age, grace)
			}
		})
	}
}

// TestRecordKeeperCountsTheBindersRemoval: a record that went in the write
// that bound the claim counts as cleared with a PV; one the keeper removed
// itself is counted once, by the keeper.
func TestRecordKeeperCountsTheBindersRemoval(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	e := newKeeperEnvWith(t, func(c *KeeperConfig) { c.Metrics = reg }, newFakeVolumes())
	cleared := func() float64 {
		v, err := testutil.GetCounterMetricValue(e.keeper.metrics.cleared.WithLabelValues(string(OutcomePVExists)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	unbound := makeClaim("data").withRecord().PersistentVolumeClaim
	bound := unbound.DeepCopy()
	bound.Spec.VolumeName = "pvc-uid-data"
	bound.Finalizers = nil
	e.keeper.countRemovedByBinder(unbound, bound)
	if got := cleared(); got != 1 {
		t.Fatalf("cleared after the binder's write = %v, want 1", got)
	}
	// The keeper's own removal (marked released before its PATCH) is not
	// counted again from the informer's event.
	e.keeper.markReleased(bound.UID)
	e.keeper.countRemovedByBinder(unbound, bound)
	// Nor a claim that is not bound, nor one being deleted.
	notBound := unbound.DeepCopy()
	notBound.Finalizers = nil
	e.keeper.countRemovedByBinder(unbound, notBound)
	if got := cleared(); got != 1 {
		t.Errorf("cleared = %v, want still 1", got)
	}
}
