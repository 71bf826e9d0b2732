package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// errLostLeadership is returned by Run when another replica took the Lease
// while this one was still running.
var errLostLeadership = errors.New("lost the leader-election lease")

func leaseNamespace(configured string) string {
	if configured != "" {
		return configured
	}
	return "default"
}

// runLeaderElected runs work only while this process holds the Lease. When
// ctx is cancelled the Lease is released so that another replica takes over
// at once, and nil is returned; losing the Lease otherwise stops work and
// returns errLostLeadership so that the process exits and restarts as a
// candidate.
func runLeaderElected(ctx context.Context, cfg ControllerConfig, client kubernetes.Interface, work func(context.Context)) error {
	logger := klog.FromContext(ctx)
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock,
		leaseNamespace(cfg.LeaderElectionNamespace), contract.LeaderLeaseName(cfg.Provisioner.DriverName),
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the leader-election lock: %w", err)
	}
	lost := false
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            contract.LeaderLeaseName(cfg.Provisioner.DriverName),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became leader, provisioning", "identity", identity)
				work(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(id string) {
				logger.V(2).Info("Leader", "identity", id)
			},
		},
	})
	if lost {
		return errLostLeadership
	}
	return nil
}
