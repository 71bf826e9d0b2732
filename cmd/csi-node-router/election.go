package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
)

// election is the leader election of --leader-election.
type election struct {
	enabled                                   bool
	namespace                                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// errLostLeadership: another replica took the Lease while this one
// labelled; the process exits and restarts as a candidate.
var errLostLeadership = errors.New("lost the leader-election lease")

// leaseName is the Lease of a driver's router: "csi-node-router-" and the
// driver's name with every character that is not a letter, digit or '-'
// replaced by '-'.
func leaseName(driver string) string {
	return "csi-node-router-" + strings.Trim(strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r - 'A' + 'a'
		}
		return '-'
	}, driver), "-")
}

// run calls work while this process holds the Lease. When ctx ends the
// Lease is released, so that a standby takes over at once.
func (e election) run(ctx context.Context, client kubernetes.Interface, driver string, work func(context.Context)) error {
	logger := klog.FromContext(ctx)
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	ns := e.namespace
	if ns == "" {
		if ns = kubeclient.PodNamespace(kubeclient.ServiceAccountNamespaceFile); ns == "" {
			return errors.New("the leader-election Lease needs a namespace: set --leader-election-namespace or $NAMESPACE outside a pod")
		}
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, leaseName(driver),
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return fmt.Errorf("creating the leader-election lock: %w", err)
	}
	lost := false
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: e.leaseDuration, RenewDeadline: e.renewDeadline, RetryPeriod: e.retryPeriod,
		ReleaseOnCancel: true, Name: leaseName(driver),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became leader, labelling", "identity", identity)
				work(ctx)
			},
			OnStoppedLeading: func() { lost = ctx.Err() == nil },
			OnNewLeader:      func(id string) { logger.V(2).Info("Leader", "identity", id) },
		},
	})
	if lost {
		return errLostLeadership
	}
	return nil
}
