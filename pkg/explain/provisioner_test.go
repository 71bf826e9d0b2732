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
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// provEvent is a ProvisioningFailed Event on the claim from component,
// last posted ago.
func provEvent(component string, ago time.Duration) *v1.Event {
	ev := failed(`failed to provision volume with StorageClass "fast": rpc error: code = Unavailable desc = busy`)
	ev.Source.Component = component
	ev.LastTimestamp = metav1.NewTime(now.Add(-ago))
	return ev
}

// inFlightClaim is a claim with the in-flight record, written ago.
func inFlightClaim(ago time.Duration) *v1.PersistentVolumeClaim {
	c := claim("n1")
	c.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	c.Finalizers = []string{contract.InFlightRecordFinalizer}
	c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "csi-provisioner", Operation: metav1.ManagedFieldsOperationUpdate,
		Time: ptr.To(metav1.NewTime(now.Add(-ago))), FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:finalizers":{"v:\"` + contract.InFlightRecordFinalizer + `\"":{}}}}`)}}}
	return c
}

// instanceCapacity is a capacity object of node's node-deployment
// instance, written ago.
func instanceCapacity(node string, ago time.Duration) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "csisc-" + node,
		CreationTimestamp: metav1.NewTime(now.Add(-ago)),
		Labels:            map[string]string{labelCapacityDriver: testDriver, labelCapacityManagedBy: instanceManagedBy + node}},
		StorageClassName: "fast", Capacity: resource.NewQuantity(10<<30, resource.BinarySI),
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{zoneKey: "z1"}}}
}

// The provisioner line weighs every sign of the driver's provisioner: a
// single replica without --leader-election that just posted an Event runs,
// nothing at all is unknown (never ✗), and ✗ needs a Lease expired beyond
// a failover with nothing of a provisioner since.
func TestProvisionerLine(t *testing.T) {
	upstreamComponent := testDriver + "_host-1_0f2e"
	cases := []struct {
		name      string
		objects   []runtime.Object
		denyLease bool
		state     State
		want      string
		cause     Cause
	}{
		{name: "no Lease, an Event of ours a second old", objects: clusterWith(nil, class("fast"), claim("n1"), provEvent(testDriver, time.Second)),
			state: Pass, want: "provisioner running: Event ProvisioningFailed from d.example.com 1s ago (no leader Lease"},
		{name: "no Lease, an Event of upstream's a minute old", objects: clusterWith(nil, class("fast"), claim("n1"), provEvent(upstreamComponent, time.Minute)),
			state: Pass, want: "provisioner running: Event ProvisioningFailed from " + upstreamComponent + " 1m0s ago"},
		{name: "no Lease, nothing", objects: clusterWith(nil, class("fast"), claim("n1")),
			state: Info, want: "unknown whether a provisioner of d.example.com runs: no leader Lease", cause: CauseNoProvisioner},
		{name: "no Lease, an Event an hour old", objects: clusterWith(nil, class("fast"), claim("n1"), provEvent(testDriver, time.Hour)),
			state: Info, want: "last sign: Event ProvisioningFailed from d.example.com 1h0m0s ago"},
		{name: "no Lease, an Event of another component", objects: clusterWith(nil, class("fast"), claim("n1"), provEvent("other.example.com", time.Second)),
			state: Info, want: "unknown whether"},
		{name: "no Lease, the in-flight record written 30s ago", objects: clusterWith(nil, class("fast"), inFlightClaim(30*time.Second)),
			state: Pass, want: "provisioner running: in-flight record on the claim, written 30s ago"},
		{name: "node deployment, an instance's capacity written a minute ago",
			objects: clusterWith(nil, class("fast"), claim("n1"), instanceCapacity("n1", time.Minute), instanceCapacity("n2", time.Hour)),
			state:   Pass, want: "capacity of the node deployment's instance(s) on n1, n2, written 1m0s ago"},
		{name: "fresh Lease", objects: cluster(class("fast"), claim("n1")),
			state: Pass, want: "provisioner running: p-1 holds Lease kube-system/"},
		{name: "Lease expired long ago, no Event", objects: clusterWith(leader(time.Hour), class("fast"), claim("n1")),
			state: Fail, want: "no provisioner running: Lease kube-system/d-example-com (last holder \"p-1\") expired", cause: CauseNoProvisioner},
		{name: "Lease expired long ago, an Event from before", objects: clusterWith(leader(time.Hour), class("fast"), claim("n1"), provEvent(testDriver, 2*time.Hour)),
			state: Fail, want: "no provisioner running", cause: CauseNoProvisioner},
		{name: "Lease expired long ago, a recent Event", objects: clusterWith(leader(time.Hour), class("fast"), claim("n1"), provEvent(testDriver, 5*time.Second)),
			state: Pass, want: "provisioner running: Event ProvisioningFailed from d.example.com 5s ago (Lease kube-system/d-example-com"},
		{name: "Lease expired during a failover", objects: clusterWith(leader(20*time.Second), class("fast"), claim("n1")),
			state: Info, want: "unknown whether"},
		{name: "Lease unreadable, a recent Event", objects: clusterWith(nil, class("fast"), claim("n1"), provEvent(testDriver, time.Second)),
			denyLease: true, state: Pass, want: "provisioner running: Event ProvisioningFailed from d.example.com 1s ago (leader Lease d-example-com could not be read)"},
		{name: "Lease unreadable, nothing", objects: clusterWith(nil, class("fast"), claim("n1")),
			denyLease: true, state: Info, want: "unknown whether a provisioner of d.example.com runs: leader Lease d-example-com could not be read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(tc.objects...)
			if tc.denyLease {
				client.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if l, ok := a.(k8stesting.ListAction); !ok || l.GetListRestrictions().Fields.Empty() {
						return false, nil, nil // the heartbeat Leases
					}
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, "", nil)
				})
			}
			r, err := Claim(ctx, client, "ns", "data", Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := WriteText(&out, r); err != nil {
				t.Fatal(err)
			}
			var line *Line
			for i := range r.Chain {
				if r.Chain[i].Step == "provisioner" {
					line = &r.Chain[i]
				}
			}
			if line == nil || line.State != tc.state || !strings.Contains(line.Text, tc.want) {
				t.Errorf("provisioner line %+v; want state %s containing %q\n%s", line, tc.state, tc.want, out.String())
			}
			if (tc.cause == CauseNoProvisioner) != (r.Cause == CauseNoProvisioner) {
				t.Errorf("cause %s (%s); want NoProvisioner: %v\n%s", r.Cause, r.Conclusion, tc.cause == CauseNoProvisioner, out.String())
			}
		})
	}
}
