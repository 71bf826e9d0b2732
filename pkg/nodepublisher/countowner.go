package nodepublisher

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// countOwner decides who owns the entry's allocatable.count: kubelet, when
// the driver's CSIDriver object sets nodeAllocatableUpdatePeriodSeconds
// (MutableCSINodeAllocatableCount, GA and always on since Kubernetes 1.36:
// kubelet then re-reads NodeGetInfo every period and writes the driver's
// max_volumes_per_node whenever the entry says otherwise), else the
// publisher. While kubelet owns it the publisher publishes the driver's own
// max_volumes_per_node too, without --reserved-volumes, so that the two
// never fight over the count. Safe for concurrent use.
type countOwner struct {
	mu sync.Mutex
	// kubelet is the last decision; it is kept when the CSIDriver cannot be
	// read.
	kubelet bool
	// decided is false until the first decision is logged.
	decided bool
	// unreadable is true while the CSIDriver cannot be read (logged once).
	unreadable bool
}

// reserved returns the volumes to subtract from the driver's
// max_volumes_per_node: p's --reserved-volumes, or 0 while kubelet owns the
// count. With no reservation there is nothing to decide and no API call.
func (p *Publisher) reserved(ctx context.Context, driver string) int64 {
	if p.cfg.ReservedVolumes == 0 {
		return 0
	}
	logger := klog.FromContext(ctx)
	o := &p.countOwner
	o.mu.Lock()
	defer o.mu.Unlock()
	kubelet := o.kubelet
	csiDriver, err := p.client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
	switch {
	case err == nil:
		kubelet = csiDriver.Spec.NodeAllocatableUpdatePeriodSeconds != nil && *csiDriver.Spec.NodeAllocatableUpdatePeriodSeconds > 0
	case apierrors.IsNotFound(err):
		// Without its CSIDriver object kubelet refreshes nothing.
		kubelet = false
	default:
		v := 4
		if !o.unreadable {
			v = 0
		}
		logger.V(v).Info("Cannot read the CSIDriver object; keeping the last decision on who owns allocatable.count",
			"driver", driver, "kubeletOwnsCount", kubelet, "err", err)
	}
	o.unreadable = err != nil && !apierrors.IsNotFound(err)
	if kubelet != o.kubelet || !o.decided {
		if kubelet {
			logger.Info("Kubelet refreshes allocatable.count (the CSIDriver sets nodeAllocatableUpdatePeriodSeconds); "+
				"publishing the driver's max_volumes_per_node without --reserved-volumes", "driver", driver,
				"reservedVolumes", p.cfg.ReservedVolumes)
		} else {
			logger.Info("Publishing allocatable.count with --reserved-volumes", "driver", driver,
				"reservedVolumes", p.cfg.ReservedVolumes)
		}
	}
	o.kubelet, o.decided = kubelet, true
	if kubelet {
		return 0
	}
	return p.cfg.ReservedVolumes
}
