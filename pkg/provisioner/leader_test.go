package provisioner

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// The leader works while it holds the Lease and, on shutdown, releases it so
// a standby can take over at once.
func TestRunLeaderElected(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	cfg := ControllerConfig{
		Provisioner: Config{DriverName: "mock.csi.example.com"}, LeaderElectionNamespace: "csi",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
	}
	working := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- runLeaderElected(ctx, cfg, client, func(ctx context.Context) {
			close(working)
			<-ctx.Done()
		})
	}()
	select {
	case <-working:
	case err := <-done:
		t.Fatalf("returned before leading: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("never became leader")
	}
	lease, err := client.CoordinationV1().Leases("csi").Get(ctx, "mock-csi-example-com", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("lease %+v, %v: want one held", lease, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v, want a clean return", err)
	}
	lease, err = client.CoordinationV1().Leases("csi").Get(context.WithoutCancel(ctx), "mock-csi-example-com", metav1.GetOptions{})
	if err != nil || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
		t.Errorf("lease after shutdown held by %v (%v), want released", lease.Spec.HolderIdentity, err)
	}
}
