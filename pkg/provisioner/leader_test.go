package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
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

// The Lease name, as the code computes it (upstream's), and as the base
// RBAC's comment gives it to whoever adds resourceNames.
func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ driver, want string }{
		{driver: "mock.csi.example.com", want: "mock-csi-example-com"},
		{driver: "ebs.csi.aws.com", want: "ebs-csi-aws-com"},
		{driver: "csi_driver.", want: "csi-driver-X"},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			if got := contract.LeaderLeaseName(tc.driver); got != tc.want {
				t.Errorf("LeaderLeaseName(%q) = %q, want %q", tc.driver, got, tc.want)
			}
		})
	}
	t.Run("base RBAC comment", func(t *testing.T) {
		rbac, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "base", "provisioner-rbac.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		example := "(mock.csi.example.com: " + contract.LeaderLeaseName("mock.csi.example.com") + ")"
		if !strings.Contains(string(rbac), example) {
			t.Errorf("deploy/kubernetes/base/provisioner-rbac.yaml does not give the Lease name's example %q", example)
		}
	})
}
