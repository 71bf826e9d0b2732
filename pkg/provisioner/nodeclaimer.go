package provisioner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// nodeClaimer is how a node deployment's instance takes immediate-binding
// claims (upstream's --node-deployment-immediate-binding). Every instance
// sees every such claim; each waits a random time, then, if the claim is
// still unselected, its node satisfies the class (allowedTopologies, the
// data source's reach) and, with a driver that reports capacity, its
// segment has room for the claim, writes volume.kubernetes.io/selected-node
// with its own node by an Update conditioned on the claim's
// resourceVersion. The API lets one instance win: the others get a
// conflict, or see the annotation, and stop. The winner then provisions
// the claim like a delayed-binding claim selected for its node, and the
// record's PATCH before CreateVolume checks the selection with the API
// again, so a claim is never provisioned twice.
//
// Waits: random in [0, BaseDelay] for a claim first seen, then doubling
// (with jitter) after each lost race or full segment, up to MaxDelay: a
// thousand instances do not all write at once, and a claim nobody can take
// is looked at again at most every MaxDelay. Safe for concurrent use.
type nodeClaimer struct {
	node    *NodeDeployment
	p       *Provisioner
	claims  corelisters.PersistentVolumeClaimLister
	classes storagelisters.StorageClassLister
	nodes   corelisters.NodeLister
	client  corev1client.PersistentVolumeClaimsGetter
	// capacity: ask the driver for room before taking a claim.
	capacity bool
	queue    workqueue.TypedDelayingInterface[cache.ObjectName]

	mu sync.Mutex
	// tries counts the failed attempts per claim; a claim is forgotten
	// once selected or gone.
	tries map[types.UID]int
}

// Annotations kube-controller-manager's PV controller puts on a claim it
// leaves to an external provisioner (the beta one for older clusters).
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

// claimerWorkers take claims at once; each attempt is a few informer reads,
// at most one GetCapacity and one Update.
const claimerWorkers = 4

func newNodeClaimer(node *NodeDeployment, p *Provisioner, claims cache.SharedIndexInformer, classes storagelisters.StorageClassLister,
	nodes corelisters.NodeLister, client corev1client.PersistentVolumeClaimsGetter, capacity bool) (*nodeClaimer, error) {
	c := &nodeClaimer{
		node: node, p: p, claims: corelisters.NewPersistentVolumeClaimLister(claims.GetIndexer()), classes: classes, nodes: nodes,
		client: client, capacity: capacity, tries: map[types.UID]int{},
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{Name: "nodeclaimer"}),
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.observe,
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if claim, ok := obj.(*v1.PersistentVolumeClaim); ok {
				c.forget(claim.UID)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching claims for immediate binding: %w", err)
	}
	return c, nil
}

// observe queues an immediate-binding claim of the driver that no node has
// taken, after its wait.
func (c *nodeClaimer) observe(obj any) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if c.candidate(claim) == nil {
		c.forget(claim.UID)
		return
	}
	c.queue.AddAfter(cache.MetaObjectToName(claim), c.wait(claim.UID))
}

// candidate returns the claim's class if the claim is an unselected,
// unbound immediate-binding claim of the driver that the PV controller has
// left to the driver's provisioner, else nil. Waiting for the PV
// controller's annotation keeps an instance from writing the claim while
// the PV controller does (its update would conflict and be retried), and
// the provisioning library needs the annotation anyway.
func (c *nodeClaimer) candidate(claim *v1.PersistentVolumeClaim) *storagev1.StorageClass {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil || claim.Annotations[annSelectedNode] != "" ||
		claim.Spec.StorageClassName == nil {
		return nil
	}
	if claim.Annotations[annStorageProvisioner] != c.p.cfg.DriverName && claim.Annotations[annBetaStorageProvisioner] != c.p.cfg.DriverName {
		return nil
	}
	class, err := c.classes.Get(*claim.Spec.StorageClassName)
	if err != nil || class.Provisioner != c.p.cfg.DriverName ||
		(class.VolumeBindingMode != nil && *class.VolumeBindingMode != storagev1.VolumeBindingImmediate) {
		return nil
	}
	return class
}

// wait is the delay before the next attempt on a claim.
func (c *nodeClaimer) wait(uid types.UID) time.Duration {
	c.mu.Lock()
	n := c.tries[uid]
	c.mu.Unlock()
	if n == 0 {
		return time.Duration(rand.Int64N(int64(c.node.BaseDelay) + 1))
	}
	d := c.node.BaseDelay << min(n, 30)
	if d <= 0 || d > c.node.MaxDelay {
		d = c.node.MaxDelay
	}
	// Jitter in [d/2, d): instances that lost together do not retry together.
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (c *nodeClaimer) failed(key cache.ObjectName, uid types.UID) {
	c.mu.Lock()
	c.tries[uid]++
	c.mu.Unlock()
	c.queue.AddAfter(key, c.wait(uid))
}

func (c *nodeClaimer) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.tries, uid)
	c.mu.Unlock()
}

// run takes claims until ctx ends; call it once, on the instance that
// provisions.
func (c *nodeClaimer) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	// Claims that were waiting before this instance started.
	for _, claim := range c.listCandidates() {
		c.queue.AddAfter(cache.MetaObjectToName(claim), c.wait(claim.UID))
	}
	var wg sync.WaitGroup
	for range claimerWorkers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	wg.Wait()
}

func (c *nodeClaimer) listCandidates() []*v1.PersistentVolumeClaim {
	all, err := c.claims.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*v1.PersistentVolumeClaim
	for _, claim := range all {
		if c.candidate(claim) != nil {
			out = append(out, claim)
		}
	}
	return out
}

func (c *nodeClaimer) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	c.attempt(ctx, key)
	return true
}

// attempt tries once to take a claim for this node.
func (c *nodeClaimer) attempt(ctx context.Context, key cache.ObjectName) {
	claim, err := c.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if err != nil {
		return // gone
	}
	class := c.candidate(claim)
	if class == nil {
		c.forget(claim.UID)
		return
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim), "node", c.node.NodeName)
	ctx = klog.NewContext(ctx, logger)
	if why := c.ineligible(ctx, claim, class); why != "" {
		// Looked at again when the claim changes, at the informers'
		// resync, or after MaxDelay when the reason may pass (room).
		logger.V(4).Info("Not taking immediate-binding claim", "reason", why)
		c.failed(key, claim.UID)
		return
	}
	taken := claim.DeepCopy()
	if taken.Annotations == nil {
		taken.Annotations = map[string]string{}
	}
	taken.Annotations[annSelectedNode] = c.node.NodeName
	// The node's label in the same write: the claim leaves the pool's
	// selection and enters this node's (selection by label).
	setLabel(&taken.ObjectMeta, nodelabel.Key, c.node.nodeValue())
	_, err = c.client.PersistentVolumeClaims(claim.Namespace).Update(ctx, taken, metav1.UpdateOptions{})
	switch {
	case err == nil:
		logger.V(2).Info("Took immediate-binding claim for this node")
		c.forget(claim.UID)
	case apierrors.IsNotFound(err):
		c.forget(claim.UID)
	case apierrors.IsConflict(err):
		// Another instance was faster, or the claim changed: look again
		// later; by then the informer tells which.
		logger.V(4).Info("Lost the race for immediate-binding claim")
		c.failed(key, claim.UID)
	default:
		logger.Error(err, "Selecting this node for an immediate-binding claim")
		c.failed(key, claim.UID)
	}
}

// ineligible says why this node cannot take the claim now, or "": the node
// must be known, satisfy the class's allowedTopologies and reach the
// claim's data source, and (capacity) its segment must have room.
func (c *nodeClaimer) ineligible(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) string {
	node, err := c.nodes.Get(c.node.NodeName)
	if err != nil {
		return fmt.Sprintf("node %q not in the informer yet: %v", c.node.NodeName, err)
	}
	if err := c.p.driverLive(); err != nil {
		return err.Error()
	}
	opts := controller.ProvisionOptions{StorageClass: class, PVC: claim, SelectedNode: node}
	req, err := c.p.buildCreateRequest(ctx, opts)
	if err != nil {
		// Taken anyway: the provision fails the same way, and its Event
		// tells the user (no instance would otherwise).
		return ""
	}
	if c.p.cfg.SupportsTopology {
		source, err := c.p.resolveSource(ctx, claim, class)
		if err != nil {
			return ""
		}
		if _, err := c.p.requirements(opts, c.node.NodeName, source); err != nil {
			return err.Error()
		}
	}
	if !c.capacity {
		return ""
	}
	q := claimSize(claim)
	size := q.Value()
	if size <= 0 {
		return ""
	}
	callCtx, cancel := context.WithTimeout(ctx, c.p.cfg.Timeout)
	defer cancel()
	resp, err := c.p.deps.CSI.GetCapacity(callCtx, &csi.GetCapacityRequest{
		VolumeCapabilities: req.csi.GetVolumeCapabilities(), Parameters: req.csi.GetParameters(),
		AccessibleTopology: &csi.Topology{Segments: c.node.Topology},
	})
	if err != nil {
		// As upstream: a failed check does not stop the attempt.
		klog.FromContext(ctx).V(3).Info("Capacity check failed, taking the claim anyway", "err", err)
		return ""
	}
	if resp.GetAvailableCapacity() < size {
		return fmt.Sprintf("%d bytes free on this node, the claim asks for %d", resp.GetAvailableCapacity(), size)
	}
	return ""
}
