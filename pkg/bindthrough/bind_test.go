package bindthrough

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const driver = "mock.csi.example.com"

type pvBuilder struct{ *v1.PersistentVolume }

func makePV(name string, claim *v1.PersistentVolumeClaim) pvBuilder {
	return pvBuilder{&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1",
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": driver}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:         v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: ptr.Deref(claim.Spec.StorageClassName, ""),
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h-" + name}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumePending},
	}}
}

func (b pvBuilder) with(f func(*v1.PersistentVolume)) pvBuilder { f(b.PersistentVolume); return b }

type claimBuilder struct{ *v1.PersistentVolumeClaim }

func makeClaim(name, class string) claimBuilder {
	return claimBuilder{&v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}}
}

func (b claimBuilder) with(f func(*v1.PersistentVolumeClaim)) claimBuilder {
	f(b.PersistentVolumeClaim)
	return b
}

func TestSkipReason(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	tests := []struct {
		name  string
		pv    *v1.PersistentVolume
		claim *v1.PersistentVolumeClaim
		want  string
	}{
		{name: "own new PV", pv: makePV("pv-a", claim).PersistentVolume, claim: claim, want: ""},
		{name: "migrated in-tree PV", claim: claim, want: "",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) {
				pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": "kubernetes.io/aws-ebs", "pv.kubernetes.io/migrated-to": driver}
			}).PersistentVolume},
		{name: "another driver's PV", claim: claim, want: "PV of another provisioner",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Annotations = nil }).PersistentVolume},
		{name: "claim gone", pv: makePV("pv-a", claim).PersistentVolume, want: "claim not found"},
		{name: "claim of another UID", pv: makePV("pv-a", claim).PersistentVolume, want: "claim of another UID",
			claim: makeClaim("a", "fast").with(func(c *v1.PersistentVolumeClaim) { c.UID = "other" }).PersistentVolumeClaim},
		{name: "claim being deleted", pv: makePV("pv-a", claim).PersistentVolume, want: "claim being deleted",
			claim: makeClaim("a", "fast").with(func(c *v1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{} }).PersistentVolumeClaim},
		{name: "claim bound elsewhere", pv: makePV("pv-a", claim).PersistentVolume, want: "claim bound to another PV",
			claim: makeClaim("a", "fast").with(func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-b" }).PersistentVolumeClaim},
		{name: "PV released", claim: claim, want: "PV Released",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeReleased }).PersistentVolume},
		{name: "PV being deleted", claim: claim, want: "PV being deleted",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.DeletionTimestamp = &metav1.Time{} }).PersistentVolume},
		{name: "PV without claim UID", claim: claim, want: "PV without a claim UID",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Spec.ClaimRef.UID = "" }).PersistentVolume},
		{name: "class mismatch", claim: claim, want: "storage class mismatch",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Spec.StorageClassName = "slow" }).PersistentVolume},
		{name: "volume mode mismatch", claim: claim, want: "volume mode mismatch",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }).PersistentVolume},
		{name: "resize pending", claim: claim, want: "PV awaits a resize",
			pv: makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Annotations[annPreResizeCapacity] = "1Gi" }).PersistentVolume},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := skipReason(tc.pv, tc.claim, driver); got != tc.want {
				t.Errorf("skipReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// env is a Binder on a fake clientset whose informers' stores are filled
// by hand (they are never run), so that a test decides what the binder
// reads.
type env struct {
	t      *testing.T
	cs     *fake.Clientset
	b      *Binder
	clock  *testclock.FakeClock
	ctx    context.Context
	writes []string
	// version numbers the resourceVersions of updates (versioned).
	version int
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, cs: fake.NewClientset(objs...), clock: testclock.NewFakeClock(time.Now()), ctx: ctx}
	e.cs.PrependReactor("update", "*", e.versioned)
	e.cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			e.writes = append(e.writes, a.GetVerb()+" "+a.GetResource().Resource+subresource(a))
		}
		return false, nil, nil
	})
	f := informers.NewSharedInformerFactory(e.cs, 0)
	vols, claims := f.Core().V1().PersistentVolumes().Informer(), f.Core().V1().PersistentVolumeClaims().Informer()
	b, err := New(Config{DriverName: driver, Client: e.cs, Volumes: vols, Claims: claims, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	e.load()
	return e
}

// versioned makes the fake's updates behave as the API server's: an
// update whose resourceVersion is not the stored one conflicts, and one
// that passes gets a new resourceVersion.
func (e *env) versioned(a k8stesting.Action) (bool, runtime.Object, error) {
	obj := a.(k8stesting.UpdateAction).GetObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	// The reactor runs under the fake's lock: read the tracker.
	stored, err := e.cs.Tracker().Get(a.GetResource(), a.GetNamespace(), m.GetName())
	if err != nil {
		return false, nil, nil
	}
	if s, _ := meta.Accessor(stored); s.GetResourceVersion() != m.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(), errors.New("the object has been modified"))
	}
	e.version++
	m.SetResourceVersion(fmt.Sprint(100 + e.version))
	return false, nil, nil
}

func subresource(a k8stesting.Action) string {
	if s := a.GetSubresource(); s != "" {
		return "/" + s
	}
	return ""
}

// load copies the API's objects into the binder's informer stores.
func (e *env) load() {
	e.t.Helper()
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	claims, err := e.cs.CoreV1().PersistentVolumeClaims("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range pvs.Items {
		_ = e.b.cfg.Volumes.GetIndexer().Update(&pvs.Items[i])
	}
	for i := range claims.Items {
		_ = e.b.cfg.Claims.GetIndexer().Update(&claims.Items[i])
	}
}

func (e *env) claim(name string) *v1.PersistentVolumeClaim {
	e.t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims("ns").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) pv(name string) *v1.PersistentVolume {
	e.t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pv
}

func TestBindWritesWhatThePVControllerWrites(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Spec.VolumeAttributesClassName = ptr.To("gold") }).PersistentVolume
	e := newEnv(t, claim, pv)
	if err := e.b.sync(e.ctx, "pv-a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	want := []string{"update persistentvolumes/status", "update persistentvolumeclaims", "update persistentvolumeclaims/status"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if got := e.pv("pv-a").Status; got.Phase != v1.VolumeBound || got.Message != "" {
		t.Errorf("PV status = %+v, want Bound without a message", got)
	}
	got := e.claim("a")
	wantAnn := map[string]string{"pv.kubernetes.io/bound-by-controller": "yes", "pv.kubernetes.io/bind-completed": "yes"}
	if diff := cmp.Diff(wantAnn, got.Annotations); diff != "" {
		t.Errorf("claim annotations (-want +got):\n%s", diff)
	}
	if got.Spec.VolumeName != "pv-a" {
		t.Errorf("claim volumeName = %q, want pv-a", got.Spec.VolumeName)
	}
	wantStatus := v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, AccessModes: pv.Spec.AccessModes,
		Capacity: pv.Spec.Capacity, CurrentVolumeAttributesClassName: ptr.To("gold")}
	if diff := cmp.Diff(wantStatus, got.Status); diff != "" {
		t.Errorf("claim status (-want +got):\n%s", diff)
	}
}

func TestBindSkipsWhatIsWritten(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).PersistentVolume
	tests := []struct {
		name  string
		pv    func(*v1.PersistentVolume)
		claim func(*v1.PersistentVolumeClaim)
		want  []string
	}{
		{name: "PV bound already", pv: func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeBound },
			want: []string{"update persistentvolumeclaims", "update persistentvolumeclaims/status"}},
		{name: "claim bound, status not yet", pv: func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeBound },
			claim: func(c *v1.PersistentVolumeClaim) {
				c.Spec.VolumeName = "pv-a"
				c.Annotations = map[string]string{"pv.kubernetes.io/bound-by-controller": "yes", "pv.kubernetes.io/bind-completed": "yes"}
			},
			want: []string{"update persistentvolumeclaims/status"}},
		{name: "all done", pv: func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeBound },
			claim: func(c *v1.PersistentVolumeClaim) {
				c.Spec.VolumeName = "pv-a"
				c.Annotations = map[string]string{"pv.kubernetes.io/bound-by-controller": "yes", "pv.kubernetes.io/bind-completed": "yes"}
				c.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, AccessModes: pv.Spec.AccessModes, Capacity: pv.Spec.Capacity}
			}},
		{name: "claim being deleted", claim: func(c *v1.PersistentVolumeClaim) {
			c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			c.Finalizers = []string{"kubernetes.io/pvc-protection"}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pv.DeepCopy(), claim.DeepCopy()
			if tc.pv != nil {
				tc.pv(p)
			}
			if tc.claim != nil {
				tc.claim(c)
			}
			e := newEnv(t, p, c)
			if err := e.b.sync(e.ctx, "pv-a"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if diff := cmp.Diff(tc.want, e.writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBindDropsTheRecordInTheBindingWrite: the finalizers of
// Config.DropFinalizers go in the claim's binding write, with no write of
// their own; other finalizers stay, and a bound claim is not written for
// them alone.
func TestBindDropsTheRecordInTheBindingWrite(t *testing.T) {
	const record = "provisioner.storage.kubernetes.io/volume-leak-protection"
	claim := makeClaim("a", "fast").with(func(c *v1.PersistentVolumeClaim) {
		c.Finalizers = []string{"kubernetes.io/pvc-protection", record}
	}).PersistentVolumeClaim
	pv := makePV("pv-a", claim).PersistentVolume
	e := newEnv(t, claim, pv)
	e.b.cfg.DropFinalizers = []string{record}
	if err := e.b.sync(e.ctx, "pv-a"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	want := []string{"update persistentvolumes/status", "update persistentvolumeclaims", "update persistentvolumeclaims/status"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	got := e.claim("a")
	if diff := cmp.Diff([]string{"kubernetes.io/pvc-protection"}, got.Finalizers); diff != "" {
		t.Errorf("claim finalizers (-want +got):\n%s", diff)
	}
	if got.Spec.VolumeName != "pv-a" || got.Status.Phase != v1.ClaimBound {
		t.Errorf("claim volumeName %q phase %s, want pv-a Bound", got.Spec.VolumeName, got.Status.Phase)
	}

	// Bound already, the record still there (the keeper's business): no write.
	bound := got.DeepCopy()
	bound.Finalizers = append(bound.Finalizers, record)
	if _, dirty := claimBound(bound, e.pv("pv-a"), []string{record}); dirty {
		t.Error("claimBound writes a bound claim for its record alone")
	}
}

func TestBindQueuesOnlyPairsToBind(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	other := makeClaim("b", "fast").PersistentVolumeClaim
	e := newEnv(t, claim, other)
	e.b.volumeChanged(makePV("pv-a", claim).PersistentVolume)
	e.b.volumeChanged(makePV("pv-b", other).with(func(pv *v1.PersistentVolume) { pv.Annotations = nil }).PersistentVolume)
	e.b.volumeChanged(makePV("pv-c", makeClaim("gone", "fast").PersistentVolumeClaim).PersistentVolume)
	if n := e.b.queue.Len(); n != 1 {
		t.Fatalf("queued %d PVs, want 1 (pv-a)", n)
	}
	if name, _ := e.b.queue.Get(); name != "pv-a" {
		t.Errorf("queued %q, want pv-a", name)
	}
}

func TestBindConflictEndsInTheSameState(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).PersistentVolume
	e := newEnv(t, claim, pv)
	conflicted := false
	e.cs.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "" && !conflicted {
			conflicted = true
			// The PV controller won: it bound the claim meanwhile.
			// The reactor runs under the fake's lock: read the tracker.
			obj, err := e.cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, "ns", "a")
			if err != nil {
				t.Fatal(err)
			}
			won := obj.(*v1.PersistentVolumeClaim).DeepCopy()
			won.ResourceVersion = "2" // the API's new version
			won.Spec.VolumeName = "pv-a"
			won.Annotations = map[string]string{"pv.kubernetes.io/bound-by-controller": "yes", "pv.kubernetes.io/bind-completed": "yes"}
			if err := e.cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, won, "ns"); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "a", nil)
		}
		return false, nil, nil
	})
	if err := e.b.sync(e.ctx, "pv-a"); !apierrors.IsConflict(err) {
		t.Fatalf("first sync: %v, want a conflict", err)
	}
	e.load()
	e.writes = nil
	if err := e.b.sync(e.ctx, "pv-a"); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	if diff := cmp.Diff([]string{"update persistentvolumeclaims/status"}, e.writes); diff != "" {
		t.Errorf("writes after the conflict (-want +got):\n%s", diff)
	}
	if got := e.claim("a"); got.Status.Phase != v1.ClaimBound || got.Spec.VolumeName != "pv-a" {
		t.Errorf("claim = %s bound to %q, want Bound to pv-a", got.Status.Phase, got.Spec.VolumeName)
	}
}

func TestBindForbiddenLeavesBindingToThePVController(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	e := newEnv(t, claim, makePV("pv-a", claim).PersistentVolume, makeClaim("b", "fast").PersistentVolumeClaim)
	e.cs.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumes/status"}, "pv-a", nil)
	})
	e.b.queue.Add("pv-a")
	e.b.queue.ShutDownWithDrain()
	e.b.work(e.ctx)
	if !e.b.forbidden() {
		t.Fatal("after a refusal the binder still binds")
	}
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(e.ctx, makePV("pv-b", e.claim("b")).PersistentVolume, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.load()
	e.writes = nil
	if err := e.b.sync(e.ctx, "pv-b"); err != nil || len(e.writes) != 0 {
		t.Errorf("while refused: sync = %v with writes %v, want none", err, e.writes)
	}
	e.clock.Step(time.Minute + time.Second)
	if e.b.forbidden() {
		t.Error("a minute later the binder still leaves binding to the PV controller")
	}
}

func TestRunQueuesWhatTheInformersHeldAtStart(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	// A binding a stopped process left half done: the PV is Bound, the
	// claim not yet.
	pv := makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeBound }).PersistentVolume
	e := newEnv(t, claim, pv)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { e.b.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := e.cs.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "a", metav1.GetOptions{})
		return err == nil && c.Status.Phase == v1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("the claim of a PV held at start was not bound: %v", err)
	}
}

// TestBindWritesNothingFromCopiesItReplaced: after a binding, the
// informers show the binder's own writes one by one, each event queueing
// the PV again; a sync from copies its writes replaced would send updates
// bound to conflict. It writes nothing until they caught up.
func TestBindWritesNothingFromCopiesItReplaced(t *testing.T) {
	tests := []struct {
		name string
		// pvCaughtUp, claimCaughtUp: the informer shows the PV, the claim
		// as written (else as before the binding).
		pvCaughtUp, claimCaughtUp bool
	}{
		{name: "PV shown, claim not yet", pvCaughtUp: true},
		{name: "claim shown, PV not yet", claimCaughtUp: true},
		{name: "neither shown yet"},
		{name: "both shown", pvCaughtUp: true, claimCaughtUp: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := makeClaim("a", "fast").PersistentVolumeClaim
			e := newEnv(t, claim, makePV("pv-a", claim).PersistentVolume)
			e.b.queue.Add("pv-a")
			e.b.processNext(e.ctx)
			if len(e.writes) != 3 {
				t.Fatalf("binding: writes %v, want 3", e.writes)
			}
			e.writes = nil
			if tc.pvCaughtUp {
				_ = e.b.cfg.Volumes.GetIndexer().Update(e.pv("pv-a"))
			}
			if tc.claimCaughtUp {
				_ = e.b.cfg.Claims.GetIndexer().Update(e.claim("a"))
			}
			// The informers' events of the objects as they show them.
			pv, _ := e.b.pvs.Get("pv-a")
			c, _ := e.b.claims.PersistentVolumeClaims("ns").Get("a")
			e.b.volumeChanged(pv)
			e.b.claimChanged(c)
			for e.b.queue.Len() > 0 {
				e.b.processNext(e.ctx)
			}
			if len(e.writes) != 0 {
				t.Errorf("writes from the informers' copies: %v, want none", e.writes)
			}
			if n := e.b.stale.size(); n != 0 && tc.pvCaughtUp && tc.claimCaughtUp {
				t.Errorf("%d pairs' stale versions kept after the informers caught up, want none", n)
			}
		})
	}
}

// TestBindWritesNothingFromACopyTheAPINeverReturned: a PV in the store
// without a resourceVersion (the copy its creator sent, written to a
// shared store) would be written unconditionally. The binder waits for
// the PV's event, then binds from the API's copy.
func TestBindWritesNothingFromACopyTheAPINeverReturned(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).PersistentVolume
	e := newEnv(t, claim, pv)
	sent := pv.DeepCopy()
	sent.ResourceVersion = ""
	_ = e.b.cfg.Volumes.GetIndexer().Update(sent)
	e.b.queue.Add("pv-a")
	e.b.processNext(e.ctx)
	if len(e.writes) != 0 {
		t.Fatalf("writes from a copy without a resourceVersion: %v, want none", e.writes)
	}
	// The watch's event of the PV.
	_ = e.b.cfg.Volumes.GetIndexer().Update(pv)
	e.b.volumeChanged(pv)
	for e.b.queue.Len() > 0 {
		e.b.processNext(e.ctx)
	}
	want := []string{"update persistentvolumes/status", "update persistentvolumeclaims", "update persistentvolumeclaims/status"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Errorf("writes after the PV's event (-want +got):\n%s", diff)
	}
}

// TestBindRetriesAConflictOnTheClaimsNextEvent: the claim changed between
// the informer's copy and the binder's write (the in-flight record's
// keeper removed its finalizer once the PV existed). The binder does not
// retry from the stale copy; the claim's next event queues the PV and the
// binding completes with one more write each.
func TestBindRetriesAConflictOnTheClaimsNextEvent(t *testing.T) {
	claim := makeClaim("a", "fast").with(func(c *v1.PersistentVolumeClaim) {
		c.Finalizers = []string{"provisioner.storage.kubernetes.io/volume-leak-protection"}
	}).PersistentVolumeClaim
	e := newEnv(t, claim, makePV("pv-a", claim).PersistentVolume)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	e.cs.PrependReactor("update", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// While the binder writes the PV's status, the keeper's PATCH
		// lands (the reactor runs under the fake's lock: the tracker).
		obj, err := e.cs.Tracker().Get(gvr, "ns", "a")
		if err != nil {
			t.Fatal(err)
		}
		if c := obj.(*v1.PersistentVolumeClaim); len(c.Finalizers) > 0 {
			c = c.DeepCopy()
			c.Finalizers, c.ResourceVersion = nil, "50"
			if err := e.cs.Tracker().Update(gvr, c, "ns"); err != nil {
				t.Fatal(err)
			}
		}
		return false, nil, nil
	})
	e.b.queue.Add("pv-a")
	e.b.processNext(e.ctx)
	want := []string{"update persistentvolumes/status", "update persistentvolumeclaims"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Fatalf("first attempt's writes (-want +got):\n%s", diff)
	}
	// The informers still show the claim as the binder read it.
	e.writes = nil
	for e.b.queue.Len() > 0 {
		e.b.processNext(e.ctx)
	}
	if len(e.writes) != 0 {
		t.Fatalf("writes from the stale copy of the claim: %v, want none", e.writes)
	}
	// The claim's event: the keeper's PATCH.
	_ = e.b.cfg.Volumes.GetIndexer().Update(e.pv("pv-a"))
	fresh := e.claim("a")
	_ = e.b.cfg.Claims.GetIndexer().Update(fresh)
	e.b.claimChanged(fresh)
	if n := e.b.queue.Len(); n != 1 {
		t.Fatalf("the claim's event queued %d PVs, want 1", n)
	}
	e.b.processNext(e.ctx)
	want = []string{"update persistentvolumeclaims", "update persistentvolumeclaims/status"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Errorf("writes after the claim's event (-want +got):\n%s", diff)
	}
	if got := e.claim("a"); got.Status.Phase != v1.ClaimBound || got.Spec.VolumeName != "pv-a" || len(got.Finalizers) != 0 {
		t.Errorf("claim = %s bound to %q with finalizers %v, want Bound to pv-a without the record", got.Status.Phase, got.Spec.VolumeName, got.Finalizers)
	}
}

// TestBindWaitsForTheClaimsRecord: with DropFinalizers, a claim whose
// informer copy predates its in-flight record (written before the PV) is
// not written from that copy, which the API would refuse: the PV's status
// is, and the claim's write waits for the claim's next event. Without an
// event, the wait ends RecordWait after the PV's creation.
func TestBindWaitsForTheClaimsRecord(t *testing.T) {
	const record = "provisioner.storage.kubernetes.io/volume-leak-protection"
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).PersistentVolume
	e := newEnv(t, claim, pv)
	pv = e.pv("pv-a")
	pv.CreationTimestamp = metav1.NewTime(e.clock.Now())
	if err := e.cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}, pv, ""); err != nil {
		t.Fatal(err)
	}
	e.load()
	e.b.cfg.DropFinalizers = []string{record}
	// The API's claim carries the record; the informer's copy does not yet.
	withRecord := claim.DeepCopy()
	withRecord.Finalizers, withRecord.ResourceVersion = []string{record}, "2"
	if err := e.cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, withRecord, "ns"); err != nil {
		t.Fatal(err)
	}
	e.b.queue.Add("pv-a")
	e.b.processNext(e.ctx)
	if diff := cmp.Diff([]string{"update persistentvolumes/status"}, e.writes); diff != "" {
		t.Fatalf("writes from the copy without the record (-want +got):\n%s", diff)
	}
	// The claim's event shows the record: the binding completes and
	// removes it, with no conflict.
	e.writes = nil
	_ = e.b.cfg.Volumes.GetIndexer().Update(e.pv("pv-a"))
	fresh := e.claim("a")
	_ = e.b.cfg.Claims.GetIndexer().Update(fresh)
	e.b.claimChanged(fresh)
	for e.b.queue.Len() > 0 {
		e.b.processNext(e.ctx)
	}
	want := []string{"update persistentvolumeclaims", "update persistentvolumeclaims/status"}
	if diff := cmp.Diff(want, e.writes); diff != "" {
		t.Errorf("writes after the claim's event (-want +got):\n%s", diff)
	}
	if got := e.claim("a"); got.Spec.VolumeName != "pv-a" || len(got.Finalizers) != 0 {
		t.Errorf("claim bound to %q with finalizers %v, want pv-a without the record", got.Spec.VolumeName, got.Finalizers)
	}

	// A claim that never shows the record (the keeper removed it, or it
	// never had one) is bound once RecordWait from the PV's creation ends.
	if w := e.b.recordWait(pv, claim); w <= 0 || w > e.b.cfg.RecordWait {
		t.Errorf("wait for a new PV's claim without the record = %v, want up to %v", w, e.b.cfg.RecordWait)
	}
	e.clock.Step(e.b.cfg.RecordWait)
	if w := e.b.recordWait(pv, claim); w != 0 {
		t.Errorf("wait after RecordWait = %v, want 0", w)
	}
}

// TestBindWaitsForAClaimTheInformerShowsLate: a PV whose claim the
// claims' informer does not hold yet is bound once it does.
func TestBindWaitsForAClaimTheInformerShowsLate(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	_, ctx := ktesting.NewTestContext(t)
	cs := fake.NewClientset()
	f := informers.NewSharedInformerFactory(cs, 0)
	b, err := New(Config{DriverName: driver, Client: cs, Volumes: f.Core().V1().PersistentVolumes().Informer(),
		Claims: f.Core().V1().PersistentVolumeClaims().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, makePV("pv-a", claim).PersistentVolume, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := b.pvs.Get("pv-a")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the PV never reached the informer: %v", err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "a", metav1.GetOptions{})
		return err == nil && c.Status.Phase == v1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("the claim shown after its PV was not bound: %v", err)
	}
}

// TestBindDoesNotRetryAGoneClaimFromTheInformer: the claim was deleted
// while the informer still shows it; the binder's write finds it gone and
// sends nothing more from that copy.
func TestBindDoesNotRetryAGoneClaimFromTheInformer(t *testing.T) {
	claim := makeClaim("a", "fast").PersistentVolumeClaim
	pv := makePV("pv-a", claim).with(func(pv *v1.PersistentVolume) { pv.Status.Phase = v1.VolumeBound }).PersistentVolume
	e := newEnv(t, claim, pv)
	if err := e.cs.CoreV1().PersistentVolumeClaims("ns").Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.writes = nil
	e.b.queue.Add("pv-a")
	for i := 0; i < 5 && e.b.queue.Len() > 0; i++ {
		e.b.processNext(e.ctx)
	}
	if diff := cmp.Diff([]string{"update persistentvolumeclaims"}, e.writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}
