package nodepublisher

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

func csiDriverObj(refreshPeriod *int64) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{NodeAllocatableUpdatePeriodSeconds: refreshPeriod}}
}

// TestCountOwner publishes, for a driver reporting max_volumes_per_node 8,
// with the CSIDriver object in each state, and checks the count: kubelet
// owns it (8, --reserved-volumes not applied) while the CSIDriver sets
// nodeAllocatableUpdatePeriodSeconds, the publisher (8 - reserved)
// otherwise; each step publishes after the CSIDriver changed.
func TestCountOwner(t *testing.T) {
	forbidden := apierrors.NewForbidden(storagev1.Resource("csidrivers"), testDriver, nil)
	type step struct {
		csiDriver *storagev1.CSIDriver // nil: none
		getErr    error                // the CSIDriver GET fails so
		want      int32
	}
	tests := []struct {
		name     string
		reserved int64
		steps    []step
		// wantGets are the CSIDriver GETs of all steps.
		wantGets int
	}{
		{name: "no CSIDriver object", reserved: 2, steps: []step{{want: 6}}, wantGets: 1},
		{name: "no refresh period", reserved: 2, steps: []step{{csiDriver: csiDriverObj(nil), want: 6}}, wantGets: 1},
		{name: "kubelet refreshes the count", reserved: 2, steps: []step{{csiDriver: csiDriverObj(ptr.To[int64](10)), want: 8}}, wantGets: 1},
		{name: "no reservation reads no CSIDriver", steps: []step{{csiDriver: csiDriverObj(ptr.To[int64](10)), want: 8}}},
		{name: "unreadable CSIDriver at start: the publisher owns", reserved: 2, steps: []step{{getErr: forbidden, want: 6}}, wantGets: 1},
		{
			name: "the refresh period set, then removed", reserved: 2, wantGets: 3,
			steps: []step{{csiDriver: csiDriverObj(nil), want: 6}, {csiDriver: csiDriverObj(ptr.To[int64](60)), want: 8}, {csiDriver: csiDriverObj(nil), want: 6}},
		},
		{
			name: "CSIDriver unreadable later: the last decision holds", reserved: 2, wantGets: 2,
			steps: []step{{csiDriver: csiDriverObj(ptr.To[int64](60)), want: 8}, {getErr: forbidden, want: 8}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(node(nil))
			var getErr error
			client.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
				return getErr != nil, nil, getErr
			})
			p, err := NewPublisher(PublisherConfig{NodeName: "n1", ReservedVolumes: tc.reserved}, client, startNodeDriver(t, ctx, 8), nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				_ = client.StorageV1().CSIDrivers().Delete(ctx, testDriver, metav1.DeleteOptions{})
				if s.csiDriver != nil {
					if _, err := client.StorageV1().CSIDrivers().Create(ctx, s.csiDriver, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				getErr = s.getErr
				if err := p.PublishOnce(ctx); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := allocatableCount(*p.Published()); got == nil || *got != s.want {
					t.Errorf("step %d: allocatable.count %v, want %d", i, got, s.want)
				}
			}
			gets := 0
			for _, a := range client.Actions() {
				if a.GetResource().Resource == "csidrivers" && a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.wantGets {
				t.Errorf("%d CSIDriver GETs, want %d", gets, tc.wantGets)
			}
		})
	}
}
