package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/explain"
)

// invalidFor answers CreateVolume of the named volume with INVALID_ARGUMENT
// and passes every other call to the driver.
type invalidFor struct {
	ControllerClient
	name string
}

func (c *invalidFor) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == c.name {
		return nil, status.Error(codes.InvalidArgument, "size not supported")
	}
	return c.ControllerClient.CreateVolume(ctx, req, opts...)
}

// TestExplainReadsProvisionerEvents keeps the wire contract between the
// provisioner's Events and explain: the whole controller (library, event
// sink, mock driver) fails or provisions claims and posts its Events on a
// fake clientset, and explain, reading that clientset, must name each
// cause. Rewording an Event, or losing the typed annotation explain keys
// on (pkg/contract), fails this test.
func TestExplainReadsProvisionerEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mock, mockClient := startMock(t, ctx, nil)
	if err := mock.SetCapacity(map[string]string{"zone": "z3"}, 0); err != nil {
		t.Fatal(err)
	}
	claims := map[string]claimBuilder{
		"placed":      makePVC("placed", "zonal").withSelectedNode("n2"),
		"full":        makePVC("full", "zonal").withSelectedNode("n3"),
		"bad-param":   makePVC("bad-param", "typo").withSelectedNode("n1"),
		"no-secret":   makePVC("no-secret", "secret").withSelectedNode("n1"),
		"driver-says": makePVC("driver-says", "zonal").withSelectedNode("n1"),
	}
	objs := []runtime.Object{makeClass("zonal").StorageClass,
		makeClass("typo").WithParams("csi.storage.k8s.io/fs-type", "xfs").StorageClass,
		makeClass("secret").WithParams("csi.storage.k8s.io/provisioner-secret-name", "absent",
			"csi.storage.k8s.io/provisioner-secret-namespace", "apps").StorageClass}
	for _, c := range claims {
		c.Annotations["volume.kubernetes.io/storage-provisioner"] = testDriver
		objs = append(objs, c.PersistentVolumeClaim)
	}
	for name, zone := range threeZones {
		objs = append(objs, makeNode(name, zone), makeCSINode(name, zoneKey))
	}
	client := runController(t, ctx, ControllerConfig{
		Provisioner:        Config{SupportsTopology: true, StrictTopology: true},
		RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: time.Hour, DisableInFlightRecord: true,
	}, &invalidFor{ControllerClient: mockClient, name: "pvc-uid-driver-says"}, objs...)
	bindWhenProvisioned(t, ctx, client, "placed")

	cases := []struct {
		name, claim string
		cause       explain.Cause
		// want is in the conclusion, or in the line of step.
		want, step string
	}{
		{name: "placement of a bound claim", claim: "placed", cause: explain.CauseBound,
			want: "placed by: selected node n2, segment " + zoneKey + "=z2"},
		{name: "hand-back for lack of capacity", claim: "full", cause: explain.CauseWaitingForPod,
			step: "selected", want: "(" + string(contract.HandBackNoCapacity) + ")"},
		{name: "bad class parameter", claim: "bad-param", cause: explain.CauseBadClassParameter, want: "class typo has a bad parameter"},
		{name: "missing secret", claim: "no-secret", cause: explain.CauseMissingSecret, want: "secret apps/absent, which class secret names"},
		{name: "driver INVALID_ARGUMENT", claim: "driver-says", cause: explain.CauseDriverInvalidArgument, want: "size not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *explain.Report
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				r, err := explain.Claim(ctx, client, "apps", tc.claim, explain.Options{})
				if err != nil {
					return false, err
				}
				got = r
				return r.Cause == tc.cause && strings.Contains(textOf(r, tc.step), tc.want), nil
			})
			if err != nil {
				t.Errorf("explain says %s: %q; want %s with %q in %q (%v)", got.Cause, textOf(got, tc.step), tc.cause, tc.want, tc.step, err)
			}
		})
	}
}

// textOf is the text of step's line of r, or r's conclusion for "".
func textOf(r *explain.Report, step string) string {
	if step == "" {
		return r.Conclusion
	}
	var out []string
	for _, l := range r.Chain {
		if l.Step == step {
			out = append(out, l.Text)
		}
	}
	return strings.Join(out, "; ")
}

// bindWhenProvisioned binds claim apps/name to its PV once the PV exists,
// as kube-controller-manager's PV controller would.
func bindWhenProvisioned(t *testing.T, ctx context.Context, client *fake.Clientset, name string) {
	t.Helper()
	pv := "pvc-uid-" + name
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("PV %s not created: %v", pv, err)
	}
	c, err := client.CoreV1().PersistentVolumeClaims("apps").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.VolumeName, c.Status.Phase = pv, v1.ClaimBound
	if _, err := client.CoreV1().PersistentVolumeClaims("apps").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFailureAnnotations: each failure the provisioner can name gets its
// typed annotation, found through the wrapping of the error.
func TestFailureAnnotations(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "s1")
	driver := &createVolumeError{name: "pvc-1", err: status.Error(codes.ResourceExhausted, "full")}
	cases := []struct {
		name  string
		state controller.ProvisioningState
		err   error
		want  map[string]string
	}{
		{name: "hand-back", state: controller.ProvisioningReschedule,
			err:  fmt.Errorf("wrapped: %w", &handBackError{reason: RescheduleNoCapacity, err: driver}),
			want: map[string]string{contract.AnnHandBack: "NoCapacity", contract.AnnDriverCode: "ResourceExhausted"}},
		{name: "hand-back not done", state: controller.ProvisioningInBackground,
			err:  fmt.Errorf("%w; not handing the claim back yet", &handBackError{reason: RescheduleNodeIneligible, err: errors.New("x")}),
			want: nil},
		{name: "invalid parameter", state: controller.ProvisioningFinished, err: fmt.Errorf("%w: unknown key(s) x", ErrInvalidParameter),
			want: map[string]string{contract.AnnRefusal: "InvalidParameter"}},
		{name: "invalid secret template", state: controller.ProvisioningFinished,
			err:  fmt.Errorf("provisioner secret name: %w", fmt.Errorf("%w %q", ErrSecretTemplate, "${pvc.name}")),
			want: map[string]string{contract.AnnRefusal: "InvalidSecretTemplate"}},
		{name: "missing secret", state: controller.ProvisioningNoChange,
			err:  fmt.Errorf("reading provisioner secret: %w", &secretError{namespace: "ns", name: "s1", err: notFound}),
			want: map[string]string{contract.AnnRefusal: "SecretNotFound", contract.AnnSecret: "ns/s1"}},
		{name: "secret unreadable for another reason", state: controller.ProvisioningNoChange,
			err:  &secretError{namespace: "ns", name: "s1", err: errors.New("connection refused")},
			want: nil},
		{name: "driver error", state: controller.ProvisioningFinished,
			err:  &createVolumeError{name: "pvc-1", err: status.Error(codes.InvalidArgument, "bad")},
			want: map[string]string{contract.AnnDriverCode: "InvalidArgument"}},
		{name: "nothing to say", state: controller.ProvisioningFinished, err: errors.New("other"), want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, failureAnnotations(tc.state, tc.err)); diff != "" {
				t.Errorf("failureAnnotations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTypedErrorsKeepMessages: the typed errors say what the formatted
// ones said (the Events' messages are unchanged).
func TestTypedErrorsKeepMessages(t *testing.T) {
	cause := errors.New("cause")
	cases := []struct {
		name string
		err  error
		want string
	}{
		{name: "hand-back", err: &handBackError{reason: RescheduleNoCapacity, err: cause},
			want: "cause; asking the scheduler to pick another node (NoCapacity)"},
		{name: "CreateVolume", err: &createVolumeError{name: "pvc-1", err: cause}, want: `CreateVolume "pvc-1": cause`},
		{name: "secret", err: &secretError{namespace: "ns", name: "s1", err: cause}, want: "secret ns/s1: cause"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			if !errors.Is(tc.err, cause) {
				t.Errorf("%v does not wrap its cause", tc.err)
			}
		})
	}
}

// TestDecisionLogFailures: the sink gives a ProvisioningFailed Event the
// annotations of the failure whose text ends its message, forgets older
// failures of the claim, and failures whose Events never came are swept.
func TestDecisionLogFailures(t *testing.T) {
	noCap := map[string]string{contract.AnnHandBack: "NoCapacity"}
	badParam := map[string]string{contract.AnnRefusal: "InvalidParameter"}
	t.Run("matched by the error's text", func(t *testing.T) {
		l := NewDecisionLog()
		l.RecordFailure("u1", errors.New("first"), noCap)
		l.RecordFailure("u1", errors.New("second"), badParam)
		l.RecordFailure("u2", errors.New("first"), badParam)
		if got := l.takeFailure("u1", `failed to provision volume with StorageClass "c": second`); !cmp.Equal(got, badParam) {
			t.Errorf("takeFailure(second) = %v, want %v", got, badParam)
		}
		if got := l.takeFailure("u1", `failed to provision volume with StorageClass "c": first`); got != nil {
			t.Errorf("takeFailure(first) after second = %v, want nil: the older failure's Event is past", got)
		}
		if got := l.takeFailure("u2", "(combined from similar events): failed ...: first"); !cmp.Equal(got, badParam) {
			t.Errorf("takeFailure of an aggregated Event = %v, want %v", got, badParam)
		}
	})
	t.Run("nothing recorded without annotations", func(t *testing.T) {
		l := NewDecisionLog()
		l.RecordFailure("u1", errors.New("x"), nil)
		if len(l.failures) != 0 {
			t.Errorf("failures = %v, want none", l.failures)
		}
	})
	t.Run("bounded per claim", func(t *testing.T) {
		l := NewDecisionLog()
		for i := range 2 * maxFailuresPerClaim {
			l.RecordFailure("u1", fmt.Errorf("attempt %d", i), noCap)
		}
		if n := len(l.failures["u1"]); n != maxFailuresPerClaim {
			t.Errorf("%d failures kept, want %d", n, maxFailuresPerClaim)
		}
	})
	t.Run("swept after failureTTL", func(t *testing.T) {
		clk := testingclock.NewFakePassiveClock(time.Now())
		l := NewDecisionLog()
		l.clock = clk
		for i := range minSweep {
			l.RecordFailure(types.UID(fmt.Sprint("old-", i)), errors.New("x"), noCap)
		}
		clk.SetTime(clk.Now().Add(failureTTL + time.Second))
		l.RecordFailure("new", errors.New("x"), noCap)
		if _, ok := l.failures["new"]; !ok || len(l.failures) != 1 {
			t.Errorf("%d claims with failures after the sweep, want only the new one", len(l.failures))
		}
	})
}

// TestEventSinkAnnotates: the event sink puts the annotations on the
// library's ProvisioningFailed and ProvisioningSucceeded Events.
func TestEventSinkAnnotates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	log := NewDecisionLog()
	sink := WithEventSink(client, client, log).CoreV1().Events("apps")
	log.RecordFailure("u1", errors.New("no room"), map[string]string{contract.AnnHandBack: "NoCapacity"})
	log.Record("u2", "selected node n1")
	claim := func(uid types.UID) v1.ObjectReference {
		return v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "apps", Name: string(uid), UID: uid}
	}
	for _, ev := range []*v1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "apps"}, InvolvedObject: claim("u1"), Reason: contract.ReasonProvisioningFailed,
			Message: `failed to provision volume with StorageClass "c": no room`},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "apps"}, InvolvedObject: claim("u2"), Reason: contract.ReasonProvisioningSucceeded,
			Message: "Successfully provisioned volume pvc-u2"},
	} {
		if _, err := sink.CreateWithEventNamespaceWithContext(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]string{
		"a": {contract.AnnHandBack: "NoCapacity"},
		"b": {contract.AnnPlacement: "selected node n1"},
	}
	for name, ann := range want {
		ev, err := client.CoreV1().Events("apps").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ann, ev.Annotations); diff != "" {
			t.Errorf("Event %s annotations (-want +got):\n%s", name, diff)
		}
	}
}
