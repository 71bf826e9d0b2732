package plugin

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// publishWait activates a pod that waits for the capacity objects of a new
// class (scheduler.ReasonCapacityNotPublished) when its wait ends: an object
// that appears meanwhile requeues it through its cluster event, but one that
// never does (a node whose provisioner does not publish) has no event, and
// kube-scheduler would retry the pod only at its periodic flush, minutes
// later. One timer per waiting pod. Safe for concurrent use.
type publishWait struct {
	mu     sync.Mutex
	timers map[string]*time.Timer
	// activate is the framework's Activate.
	activate func(pods map[string]*v1.Pod)
}

// add arms the pod's timer to fire after left, unless one is armed.
func (w *publishWait) add(pod *v1.Pod, left time.Duration) {
	key := pod.Namespace + "/" + pod.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.timers[key]; ok {
		return
	}
	// A little after the end, so that the pod's next cycle finds the wait
	// over.
	w.timers[key] = time.AfterFunc(left+100*time.Millisecond, func() {
		w.mu.Lock()
		delete(w.timers, key)
		w.mu.Unlock()
		w.activate(map[string]*v1.Pod{key: pod})
	})
}

// waitForCapacity returns the PreFilter status of a pod whose new class's
// capacity is not published on every node it may use yet (nil when it need
// not wait), and arms the pod's activation at the end of the wait.
func (p *Plugin) waitForCapacity(podVols *scheduler.PodVolumes, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	list := make([]*v1.Node, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil {
			list = append(list, n)
		}
	}
	st, left := p.core.CapacityNotPublished(podVols, list)
	if st == nil {
		return nil
	}
	if p.publishWait != nil {
		p.publishWait.add(pod, left)
	}
	return fwk.NewStatus(fwk.Unschedulable, st.String())
}
