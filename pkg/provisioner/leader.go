package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// errLostLeadership is returned by Run when another replica took the Lease
// while this one was still running.
var errLostLeadership = errors.New("lost the leader-election lease")

// leaseName returns the Lease name for a driver, the one upstream
// external-provisioner uses, so that replicas of either image elect one
// leader between them (during a rolling update from one to the other, only
// one provisions): the driver name with every character that is not a
// letter, digit or '-' replaced by '-', and an 'X' appended when it would
// end in '-'. "mock.csi.example.com" gives "mock-csi-example-com".
func leaseName(driver string) string {
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, driver)
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}

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
		leaseNamespace(cfg.LeaderElectionNamespace), leaseName(cfg.Provisioner.DriverName),
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
		Name:            leaseName(cfg.Provisioner.DriverName),
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
