package nodepublisher

import (
	"context"
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// TestRunRestoresEntry runs the publisher (max_volumes_per_node 4,
// --reserved-volumes 1, a resync too long to matter) and then rewrites its
// entry as kubelet does when the driver registers again, or removes it:
// the publisher restores its entry (count 3) at once, without waiting for
// its resync.
func TestRunRestoresEntry(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*storagev1.CSINode)
	}{
		{name: "kubelet writes the driver's own count", mutate: func(c *storagev1.CSINode) {
			c.Spec.Drivers[0].Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To[int32](4)}
		}},
		{name: "entry removed", mutate: func(c *storagev1.CSINode) { c.Spec.Drivers = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(node(nil))
			p, err := NewPublisher(PublisherConfig{NodeName: "n1", ReservedVolumes: 1, ResyncPeriod: time.Hour, ProbeInterval: time.Hour},
				client, startNodeDriver(t, ctx, 4), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			if got := waitCount(ctx, t, client, 3); got != 3 {
				t.Fatalf("first publish: count %d, want 3", got)
			}
			// The publisher's informer must have seen its entry before the
			// rewrite, as it would on a cluster: wait for its watch.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return slices.ContainsFunc(client.Actions(), func(a k8stesting.Action) bool { return a.GetVerb() == "watch" }), nil
			}); err != nil {
				t.Fatalf("the publisher never watched its CSINode: %v", err)
			}
			cur, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(cur)
			if _, err := client.StorageV1().CSINodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := waitCount(ctx, t, client, 3); got != 3 {
				t.Errorf("after the rewrite: count %d, want the publisher's 3 again", got)
			}
		})
	}
}

// waitCount waits up to 30 s until the entry of testDriver in CSINode n1
// has count want, and returns the last count seen (-1: none).
func waitCount(ctx context.Context, t *testing.T, client *fake.Clientset, want int32) int32 {
	t.Helper()
	got := int32(-1)
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got = -1
		cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == testDriver && allocatableCount(d) != nil {
				got = *allocatableCount(d)
			}
		}
		return got == want, nil
	})
	return got
}
