package explain

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// lineOf is the text of the report's line of step.
func lineOf(r *Report, step string) string {
	for _, l := range r.Chain {
		if l.Step == step {
			return l.Text
		}
	}
	return ""
}

// TestLeaderLeaseOfDriver finds the provisioner's leader Lease by the name
// the provisioner gives it (upstream's rule, contract.LeaderLeaseName),
// also for a driver whose name ends in a character a Lease name cannot end
// in, where upstream appends an 'X'.
func TestLeaderLeaseOfDriver(t *testing.T) {
	cases := []struct{ name, driver, lease string }{
		{name: "dotted name", driver: "d.example.com", lease: "d-example-com"},
		{name: "name ending in '_'", driver: "odd.driver_", lease: "odd-driver-X"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := leader(time.Second)
			l.Name = tc.lease
			sc := class("fast")
			sc.Provisioner = tc.driver
			r, err := Claim(ctx, fake.NewClientset(clusterWith(l, sc, claim(""))...), "ns", "data", Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := lineOf(r, "provisioner"), "holds Lease kube-system/"+tc.lease; !strings.Contains(got, want) {
				t.Errorf("provisioner line %q; want it to contain %q", got, want)
			}
		})
	}
}

// TestHandBackHistory: explain tells a hand-back by the Event's typed
// annotation, whatever the message says.
func TestHandBackHistory(t *testing.T) {
	const prose = `failed to provision volume with StorageClass "fast": rpc error: code = ResourceExhausted desc = full; asking the scheduler to pick another node (NoCapacity)`
	cases := []struct {
		name  string
		event runtime.Object
		want  string
	}{
		{name: "annotated", event: failed("the segment is full", contract.AnnHandBack, string(contract.HandBackNoCapacity)),
			want: "handed back at 03:03:05 (NoCapacity)"},
		{name: "another reason", event: failed(prose, contract.AnnHandBack, string(contract.HandBackNodeIneligible)),
			want: "handed back at 03:03:05 (NodeIneligible)"},
		{name: "prose without the annotation", event: failed(prose), want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			r, err := Claim(ctx, fake.NewClientset(cluster(class("fast"), claim(""), tc.event)...), "ns", "data", Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			got := lineOf(r, "selected")
			if tc.want == "" && strings.Contains(got, "handed back") || !strings.Contains(got, tc.want) {
				t.Errorf("selected line %q; want %q", got, tc.want)
			}
		})
	}
}
