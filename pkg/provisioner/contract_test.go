package provisioner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
)

// finalizerPV is the library's (and upstream's) PV deletion-protection
// finalizer.
const finalizerPV = "external-provisioner.volume.kubernetes.io/finalizer"

type pvBuilder struct{ *v1.PersistentVolume }

// makeStaticPV is a PV made by hand (no pv.kubernetes.io/provisioned-by) of
// driver with volume handle handle, bound to the claim apps/<name>.
func makeStaticPV(name, driverName, handle string, reclaim v1.PersistentVolumeReclaimPolicy, phase v1.PersistentVolumePhase) pvBuilder {
	return pvBuilder{&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: reclaim,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "apps", Name: name},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: handle}},
		},
		Status: v1.PersistentVolumeStatus{Phase: phase},
	}}
}

func (b pvBuilder) withFinalizer() pvBuilder {
	b.Finalizers = append(b.Finalizers, finalizerPV)
	return b
}

func makeAttachment(name, pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
}

// runController runs the whole Controller over a fake clientset seeded
// with objs and the mock driver, until the test ends.
func runController(t *testing.T, ctx context.Context, cfg ControllerConfig, csiClient ControllerClient, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset(objs...)
	runControllerOn(t, ctx, cfg, csiClient, client)
	return client
}

// runControllerOn runs the whole Controller over client and the mock
// driver, until the test ends.
func runControllerOn(t *testing.T, ctx context.Context, cfg ControllerConfig, csiClient ControllerClient, client *fake.Clientset) {
	t.Helper()
	cfg.Provisioner.DriverName = testDriver
	ctrl, err := NewController(ctx, cfg, Clients{Work: client}, csiClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestStaticPVFinalizer: the deletion-protection finalizer goes on every
// Bound PV of the driver whose reclaim policy is Delete, also one made by
// hand, as upstream (the library's AddFinalizer(true), unconditional since
// upstream v6.2 removed the HonorPVReclaimPolicy gate); a Retain PV and a PV
// of another driver get none, and a PV whose policy became Retain loses it.
func TestStaticPVFinalizer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx, nil)
	pvs := map[string]*v1.PersistentVolume{
		"static-delete": makeStaticPV("static-delete", testDriver, "h1", v1.PersistentVolumeReclaimDelete, v1.VolumeBound).PersistentVolume,
		"static-retain": makeStaticPV("static-retain", testDriver, "h2", v1.PersistentVolumeReclaimRetain, v1.VolumeBound).PersistentVolume,
		"other-driver":  makeStaticPV("other-driver", "other.example.com", "h3", v1.PersistentVolumeReclaimDelete, v1.VolumeBound).PersistentVolume,
		"now-retain":    makeStaticPV("now-retain", testDriver, "h4", v1.PersistentVolumeReclaimRetain, v1.VolumeBound).withFinalizer().PersistentVolume,
		"pending":       makeStaticPV("pending", testDriver, "h5", v1.PersistentVolumeReclaimDelete, v1.VolumeAvailable).PersistentVolume,
	}
	var objs []runtime.Object
	for _, pv := range pvs {
		objs = append(objs, pv)
	}
	client := runController(t, ctx, ControllerConfig{}, csiClient, objs...)
	want := map[string]bool{"static-delete": true}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for name := range pvs {
			pv, err := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if slices.Contains(pv.Finalizers, finalizerPV) != want[name] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for name := range pvs {
			pv, _ := client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			t.Logf("%s: finalizers %v, want finalizer %v", name, pv.Finalizers, want[name])
		}
		t.Fatalf("finalizers not as expected: %v", err)
	}
}

// TestDeleteWaitsForDetach runs the whole controller: a released PV whose
// volume a VolumeAttachment still names is not deleted (its volume stays in
// the driver) and gets a VolumeFailedDelete Event naming the attachment;
// once the attachment is gone the PV and its volume are deleted, at once
// rather than at the end of the (here one hour) backoff.
func TestDeleteWaitsForDetach(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, csiClient := startMock(t, ctx, nil)
	resp, err := csiClient.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "static", VolumeCapabilities: []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}})
	if err != nil {
		t.Fatal(err)
	}
	handle := resp.GetVolume().GetVolumeId()
	pv := makeStaticPV("released", testDriver, handle, v1.PersistentVolumeReclaimDelete, v1.VolumeReleased).withFinalizer()
	client := fake.NewClientset(pv.PersistentVolume, makeAttachment("va-1", "released", "n1"))
	// The attachment's delete below must reach the informer's watch.
	attachmentsWatched := fakewatch.Opened(t, &client.Fake, "volumeattachments")
	runControllerOn(t, ctx, ControllerConfig{
		Provisioner:        Config{SupportsAttach: true},
		RetryIntervalStart: time.Hour, RetryIntervalMax: time.Hour,
	}, csiClient, client)

	var msg string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Name == "released" && ev.Reason == "VolumeFailedDelete" {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no VolumeFailedDelete Event: %v", err)
	}
	if !strings.Contains(msg, `VolumeAttachment va-1 (node n1)`) {
		t.Errorf("Event %q does not name the VolumeAttachment", msg)
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, "released", metav1.GetOptions{}); err != nil {
		t.Errorf("PV gone while attached: %v", err)
	}
	if n := len(mock.Volumes()); n != 1 {
		t.Errorf("driver has %d volumes while attached, want 1", n)
	}

	attachmentsWatched()
	if err := client.StorageV1().VolumeAttachments().Delete(ctx, "va-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, "released", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("PV not deleted after its VolumeAttachment went: %v", err)
	}
	if n := len(mock.Volumes()); n != 0 {
		t.Errorf("driver still has %d volumes", n)
	}
}

// TestDeleteRefusedWhileAttached checks the Provisioner alone: only
// attachments of the PV itself block, DeleteVolume is not called while
// one exists, and without an AttachmentIndex (a driver without
// PUBLISH_UNPUBLISH_VOLUME) nothing is checked.
func TestDeleteRefusedWhileAttached(t *testing.T) {
	cases := []struct {
		name        string
		attachments []*storagev1.VolumeAttachment
		noIndex     bool
		wantErr     string
	}{
		{name: "attached", attachments: []*storagev1.VolumeAttachment{makeAttachment("va-b", "pv", "n2"), makeAttachment("va-a", "pv", "n1")},
			wantErr: `VolumeAttachment va-a (node n1), va-b (node n2) exists`},
		{name: "other PV attached", attachments: []*storagev1.VolumeAttachment{makeAttachment("va", "other", "n1")}},
		{name: "inline volume attached", attachments: []*storagev1.VolumeAttachment{{ObjectMeta: metav1.ObjectMeta{Name: "inline"},
			Spec: storagev1.VolumeAttachmentSpec{NodeName: "n1", Source: storagev1.VolumeAttachmentSource{InlineVolumeSpec: &v1.PersistentVolumeSpec{}}}}}},
		{name: "no index", noIndex: true, attachments: []*storagev1.VolumeAttachment{makeAttachment("va", "pv", "n1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{nodes: threeZones})
			if !tc.noIndex {
				var objs []runtime.Object
				for _, va := range tc.attachments {
					objs = append(objs, va)
				}
				e.p.deps.Attachments = attachmentIndexOf(t, e.ctx, objs...)
			}
			err := e.p.Delete(e.ctx, makeStaticPV("pv", testDriver, "vol-1", v1.PersistentVolumeReclaimDelete, v1.VolumeReleased).PersistentVolume)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if len(e.csi.deletes) != 1 {
					t.Errorf("DeleteVolume calls = %d, want 1", len(e.csi.deletes))
				}
				return
			}
			if !errors.Is(err, ErrVolumeAttached) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Delete = %v, want ErrVolumeAttached saying %q", err, tc.wantErr)
			}
			if len(e.csi.deletes) != 0 {
				t.Error("DeleteVolume called while attached")
			}
		})
	}
}

// attachmentIndexOf returns an AttachmentIndex over a synced informer of a
// fake clientset holding objs.
func attachmentIndexOf(t *testing.T, ctx context.Context, objs ...runtime.Object) *AttachmentIndex {
	t.Helper()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	idx, err := NewAttachmentIndex(factory.Storage().V1().VolumeAttachments().Informer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	return idx
}

// failingCreate answers CreateVolume with err; nothing else is called.
type failingCreate struct {
	ControllerClient
	err error
}

func (f *failingCreate) CreateVolume(context.Context, *csi.CreateVolumeRequest, ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	return nil, f.err
}

// TestInvalidArgumentRetriesSlowly: after INVALID_ARGUMENT the claim's next
// retry waits the longest backoff from the first failure on, and the Event
// says when; any other failure keeps the normal exponential backoff.
func TestInvalidArgumentRetriesSlowly(t *testing.T) {
	const start, max = time.Millisecond, time.Hour
	cases := []struct {
		name      string
		code      codes.Code
		wantDelay time.Duration
		wantState controller.ProvisioningState
	}{
		{name: "invalid argument", code: codes.InvalidArgument, wantDelay: max, wantState: controller.ProvisioningFinished},
		{name: "internal", code: codes.Internal, wantDelay: start, wantState: controller.ProvisioningFinished},
		{name: "unavailable", code: codes.Unavailable, wantDelay: start, wantState: controller.ProvisioningInBackground},
		{name: "out of range", code: codes.OutOfRange, wantDelay: start, wantState: controller.ProvisioningFinished},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fail := &failingCreate{err: status.Error(tc.code, "bad parameter foo")}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones, direct: fail})
			retries := NewSlowRetries(workqueue.NewItemExponentialFailureRateLimiter(start, max), max)
			e.p.deps.Retries = retries
			claim := makePVC("data", "zonal").withSelectedNode("n1").PersistentVolumeClaim
			_, state, err := e.provision(t, claim, makeClass("zonal").StorageClass, makeNode("n1", "z1"))
			if err == nil || !strings.Contains(err.Error(), "code = "+tc.code.String()) {
				t.Fatalf("Provision error %v, want code %v", err, tc.code)
			}
			if state != tc.wantState {
				t.Errorf("state %v, want %v", state, tc.wantState)
			}
			slow := strings.Contains(err.Error(), "next attempt in 1h0m0s")
			if slow != (tc.wantDelay == max) {
				t.Errorf("error %q: says the slow retry = %v, want %v", err, slow, tc.wantDelay == max)
			}
			// The library queues claims by UID.
			if got := retries.When(string(claim.UID)); got != tc.wantDelay {
				t.Errorf("first retry after %v, want %v", got, tc.wantDelay)
			}
			// The mark is used once: a later failure of another kind
			// backs off normally (2nd exponential step).
			fail.err = status.Error(codes.Internal, "flaky")
			if _, _, err := e.provision(t, claim, makeClass("zonal").StorageClass, makeNode("n1", "z1")); err == nil {
				t.Fatal("Provision succeeded")
			}
			if got := retries.When(string(claim.UID)); got != 2*start {
				t.Errorf("retry after a later INTERNAL: %v, want %v", got, 2*start)
			}
		})
	}
}

// TestSlowRetries checks the rate limiter alone.
func TestSlowRetries(t *testing.T) {
	const start, max = time.Second, time.Minute
	cases := []struct {
		name string
		run  func(s *SlowRetries) []time.Duration
		want []time.Duration
	}{
		{name: "unmarked backs off exponentially", run: func(s *SlowRetries) []time.Duration {
			return []time.Duration{s.When("a"), s.When("a"), s.When("a")}
		}, want: []time.Duration{start, 2 * start, 4 * start}},
		{name: "a mark slows one retry", run: func(s *SlowRetries) []time.Duration {
			s.Slow("a")
			return []time.Duration{s.When("a"), s.When("a")}
		}, want: []time.Duration{max, 2 * start}},
		{name: "marks are per item", run: func(s *SlowRetries) []time.Duration {
			s.Slow("a")
			return []time.Duration{s.When("b"), s.When("a")}
		}, want: []time.Duration{start, max}},
		{name: "unmark", run: func(s *SlowRetries) []time.Duration {
			s.Slow("a")
			s.Unmark("a")
			return []time.Duration{s.When("a")}
		}, want: []time.Duration{start}},
		{name: "forget drops the mark and the backoff", run: func(s *SlowRetries) []time.Duration {
			s.When("a")
			s.Slow("a")
			s.Forget("a")
			return []time.Duration{s.When("a"), time.Duration(s.NumRequeues("a"))}
		}, want: []time.Duration{start, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSlowRetries(workqueue.NewItemExponentialFailureRateLimiter(start, max), max)
			if got := tc.run(s); !slices.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
			if len(s.marked) != 0 {
				t.Errorf("marks left: %v", s.marked)
			}
		})
	}
}

// codeByName fails CreateVolume with the code given for the volume's name
// and counts the calls per name.
type codeByName struct {
	ControllerClient
	codes map[string]codes.Code

	mu    sync.Mutex
	calls map[string]int
}

func (c *codeByName) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest, _ ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[req.GetName()]++
	return nil, status.Error(c.codes[req.GetName()], "refused")
}

func (c *codeByName) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

// TestControllerRetriesInvalidArgumentSlowly runs the whole controller: a
// claim failing with INTERNAL is retried on the exponential backoff (10ms,
// 20ms, 40ms ...) while a claim failing with INVALID_ARGUMENT, queued at
// the same time, waits the maximum (an hour) after its first attempt.
//
// The in-flight record is off: its finalizer PATCH before each CreateVolume
// is a claim update, which the library queues at once, bypassing the rate
// limiter. A real API server sends no event for a PATCH that changes
// nothing, so there only the first attempt (which adds the finalizer) is
// followed by an immediate second one; the fake clientset sends an event for
// every PATCH, which would retry every attempt at once, whatever the code.
func TestControllerRetriesInvalidArgumentSlowly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, mockClient := startMock(t, ctx, nil)
	csiClient := &codeByName{ControllerClient: mockClient, calls: map[string]int{},
		codes: map[string]codes.Code{"pvc-uid-invalid": codes.InvalidArgument, "pvc-uid-internal": codes.Internal}}
	objs := []runtime.Object{makeClass("plain").Immediate().StorageClass}
	for _, name := range []string{"invalid", "internal"} {
		c := makePVC(name, "plain").PersistentVolumeClaim
		c.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": testDriver}
		objs = append(objs, c)
	}
	runController(t, ctx, ControllerConfig{RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: time.Hour, DisableInFlightRecord: true},
		csiClient, objs...)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return csiClient.count("pvc-uid-internal") >= 4, nil
	}); err != nil {
		t.Fatalf("the INTERNAL claim was tried %d times, want 4 or more: %v", csiClient.count("pvc-uid-internal"), err)
	}
	if n := csiClient.count("pvc-uid-invalid"); n != 1 {
		t.Errorf("the INVALID_ARGUMENT claim was tried %d times while the INTERNAL one was tried %d times, want once",
			n, csiClient.count("pvc-uid-internal"))
	}
}
