package plugin

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// heartbeatSyncTimeout bounds how long New waits for the heartbeat Lease
// cache; until it fills, every node counts as live.
const heartbeatSyncTimeout = 30 * time.Second

// waiting remembers the pods the filter rejected on a node because the
// driver's heartbeat there expired, so that they are activated (moved back
// to the scheduling queue's activeQ) as soon as the node's Lease is renewed
// again. kube-scheduler cannot requeue on these Leases by itself: an event
// registered for a Lease GVK makes it watch every Lease of the cluster,
// the kubelets' node Leases included, with no label selector. Safe for
// concurrent use.
type waiting struct {
	mu     sync.Mutex
	byNode map[string]map[string]*v1.Pod // node -> pod key -> pod
	byPod  map[string]map[string]bool    // pod key -> nodes
}

func newWaiting() *waiting {
	return &waiting{byNode: map[string]map[string]*v1.Pod{}, byPod: map[string]map[string]bool{}}
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// add records that pod waits for the driver on node.
func (w *waiting) add(node string, pod *v1.Pod) {
	key := podKey(pod)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byNode[node] == nil {
		w.byNode[node] = map[string]*v1.Pod{}
	}
	w.byNode[node][key] = pod
	if w.byPod[key] == nil {
		w.byPod[key] = map[string]bool{}
	}
	w.byPod[key][node] = true
}

// take returns and forgets the pods waiting for node.
func (w *waiting) take(node string) map[string]*v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	pods := w.byNode[node]
	delete(w.byNode, node)
	for key := range pods {
		delete(w.byPod[key], node)
		if len(w.byPod[key]) == 0 {
			delete(w.byPod, key)
		}
	}
	return pods
}

// forget drops a pod that no longer waits (bound to a node, or deleted).
func (w *waiting) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for node := range w.byPod[key] {
		delete(w.byNode[node], key)
		if len(w.byNode[node]) == 0 {
			delete(w.byNode, node)
		}
	}
	delete(w.byPod, key)
}

// len returns the number of waiting pods.
func (w *waiting) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPod)
}

// heartbeats are the driver heartbeat Leases the core reads: an informer
// factory of their own, restricted to the heartbeat label and, when set, to
// namespace (scheduler.HeartbeatInformer).
type heartbeats struct {
	client    kubernetes.Interface
	namespace string
	factory   informers.SharedInformerFactory
	leases    cache.SharedIndexInformer
	live      *heartbeat.Liveness
}

// newHeartbeats builds the heartbeat Lease informer; followHeartbeats runs it.
func newHeartbeats(client kubernetes.Interface, namespace string) (*heartbeats, error) {
	factory, leases, live, err := scheduler.HeartbeatInformer(client, namespace)
	if err != nil {
		return nil, err
	}
	return &heartbeats{client: client, namespace: namespace, factory: factory, leases: leases, live: live}, nil
}

// followHeartbeats runs the core's heartbeat Lease informer as an optional
// API started on ctx once the scheduler may list them, and has the plugin
// activate the pods it rejected on a node when that node's Lease is renewed
// again. Until the Leases are read, every node counts as live.
func (p *Plugin) followHeartbeats(ctx context.Context, hb *heartbeats) error {
	p.waiting = newWaiting()
	p.leasesSynced = hb.leases.HasSynced
	if _, err := hb.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.leaseChanged,
		UpdateFunc: func(_, obj any) { p.leaseChanged(obj) },
		DeleteFunc: p.leaseDeleted, // a node without a Lease counts as live
	}); err != nil {
		return err
	}
	go scheduler.HeartbeatAPI(hb.client, hb.namespace, hb.factory).Run(ctx)
	return nil
}

// forgetBoundPods has the waiting sets forget a pod once it is bound to a
// node or deleted.
func (p *Plugin) forgetBoundPods() error {
	forget := func(key string) {
		p.sourceWaiting.forget(key)
		if p.waiting != nil {
			p.waiting.forget(key)
		}
	}
	_, err := p.handle.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
				forget(podKey(pod))
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				forget(t.Key)
				return
			}
			if pod, ok := obj.(*v1.Pod); ok {
				forget(podKey(pod))
			}
		},
	})
	return err
}

// leaseChanged activates the pods waiting for the Lease's node once the
// driver is live there again: the Lease was renewed.
func (p *Plugin) leaseChanged(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if live, _, _ := heartbeat.LeaseLive(lease, time.Now()); live {
		p.activate(lease)
	}
}

// leaseDeleted activates the pods waiting for the Lease's node: a node
// without a heartbeat Lease counts as live.
func (p *Plugin) leaseDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if lease, ok := obj.(*coordinationv1.Lease); ok {
		p.activate(lease)
	}
}

func (p *Plugin) activate(lease *coordinationv1.Lease) {
	if lease.Labels[heartbeat.LeaseDriverLabel] != p.core.Driver() || lease.Spec.HolderIdentity == nil {
		return
	}
	node := *lease.Spec.HolderIdentity
	if pods := p.waiting.take(node); len(pods) > 0 {
		p.logger.V(2).Info("CSI driver live again: activating the pods rejected for its silence",
			"node", node, "driver", p.core.Driver(), "pods", len(pods))
		p.handle.Activate(p.logger, pods)
	}
}

// rejected remembers pod when st rejects node for the driver's silence, or
// for a data source not known yet: no framework event would retry it.
func (p *Plugin) rejected(st *scheduler.Status, node string, pod *v1.Pod) {
	switch {
	case p.waiting != nil && st.Reason == scheduler.ReasonDriverNotLive:
		p.waiting.add(node, pod)
	case st.Reason == scheduler.ReasonDataSourceUnknown:
		p.sourceWaiting.add("", pod)
	}
}

// activateSourceWaiting activates the pods rejected because a snapshot was
// not known: one may be known now.
func (p *Plugin) activateSourceWaiting() {
	if pods := p.sourceWaiting.take(""); len(pods) > 0 {
		p.logger.V(2).Info("VolumeSnapshots changed: activating the pods waiting for their snapshot", "pods", len(pods))
		p.handle.Activate(p.logger, pods)
	}
}
