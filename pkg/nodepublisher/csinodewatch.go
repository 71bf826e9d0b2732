package nodepublisher

import (
	"context"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// watchCSINode watches the node's CSINode (one object, by name) until ctx
// ends, and signals on the returned channel when the driver's entry there
// differs from the one last published: kubelet rewrote it when the driver
// registered again (a driver, registrar or kubelet restart, a rolling
// update of the node DaemonSet) or someone removed it. Run then publishes
// at once instead of at its next resync, so that the count the scheduler
// reads is the publisher's again within a moment. The publisher's own
// writes match what it published and signal nothing. The watch never
// blocks publishing: while it cannot list (RBAC without list and watch on
// csinodes) the resync still restores the entry.
func (p *Publisher) watchCSINode(ctx context.Context) <-chan struct{} {
	changed := make(chan struct{}, 1)
	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.cfg.NodeName).String()
	}))
	informer := factory.Storage().V1().CSINodes().Informer()
	signal := func(obj any) {
		csiNode, ok := obj.(*storagev1.CSINode)
		if !ok || !p.entryDiffers(csiNode) {
			return
		}
		klog.FromContext(ctx).V(2).Info("CSINode entry changed by another writer; publishing again", "node", p.cfg.NodeName)
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    signal,
		UpdateFunc: func(_, obj any) { signal(obj) },
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Watching the CSINode failed; the entry is restored at each resync only")
		return changed
	}
	factory.Start(ctx.Done())
	return changed
}

// entryDiffers says whether csiNode lacks the entry last published or
// holds another one; false before anything was published.
func (p *Publisher) entryDiffers(csiNode *storagev1.CSINode) bool {
	published := p.Published()
	if published == nil {
		return false
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == published.Name {
			return !sameEntry(d, *published)
		}
	}
	return true
}
