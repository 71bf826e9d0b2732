package nodedeploy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

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
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// Claimer is how a node deployment's instance takes immediate-binding
// claims (upstream's --node-deployment-immediate-binding). Every instance
// sees every such claim; each waits a random time, then, if the claim is
// still unselected, its node is known and the provisioner finds that the
// node may take it (ClaimerConfig.Check: the class's allowedTopologies, the
// data source's reach, room in the node's segment), writes
// volume.kubernetes.io/selected-node with its own node by an Update
// conditioned on the claim's resourceVersion. The API lets one instance
// win: the others get a conflict, or see the annotation, and stop. The
// winner then provisions the claim like a delayed-binding claim selected
// for its node, and the record's PATCH before CreateVolume checks the
// selection with the API again, so a claim is never provisioned twice.
//
// Waits: random in [0, BaseDelay] for a claim first seen, then doubling
// (with jitter) after each lost race or full segment, up to MaxDelay: a
// thousand instances do not all write at once, and a claim nobody can take
// is looked at again at most every MaxDelay. Safe for concurrent use.
type Claimer struct {
	cfg    ClaimerConfig
	claims corelisters.PersistentVolumeClaimLister
	queue  workqueue.TypedDelayingInterface[cache.ObjectName]

	mu sync.Mutex
	// tries counts the failed attempts per claim; a claim is forgotten
	// once selected or gone.
	tries map[types.UID]int
}

// ClaimerConfig is what a Claimer reads and writes. All fields are
// required.
type ClaimerConfig struct {
	// Node is the instance's node deployment, with defaults
	// (Config.WithDefaults).
	Node *Config
	// DriverName is the driver whose claims are taken.
	DriverName string
	// Claims is the informer of claims; the Claimer adds its handler.
	Claims cache.SharedIndexInformer
	// Classes and Nodes read classes and the instance's own Node.
	Classes storagelisters.StorageClassLister
	Nodes   corelisters.NodeLister
	// Client writes the claims taken.
	Client corev1client.PersistentVolumeClaimsGetter
	// Check says why node may not take the claim of class now, or "": the
	// provisioner's answer (its driver answers, the node satisfies the
	// class and reaches the data source, its segment has room). It may be
	// called from several goroutines at once.
	Check func(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass, node *v1.Node) string
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

// NewClaimer returns a Claimer watching cfg.Claims; run it with Run.
func NewClaimer(cfg ClaimerConfig) (*Claimer, error) {
	if cfg.Node == nil || cfg.Claims == nil || cfg.Classes == nil || cfg.Nodes == nil || cfg.Client == nil || cfg.Check == nil {
		return nil, errors.New("nodedeploy: a Claimer needs Node, Claims, Classes, Nodes, Client and Check")
	}
	c := &Claimer{
		cfg: cfg, claims: corelisters.NewPersistentVolumeClaimLister(cfg.Claims.GetIndexer()), tries: map[types.UID]int{},
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{Name: "nodeclaimer"}),
	}
	if _, err := cfg.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
func (c *Claimer) observe(obj any) {
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
func (c *Claimer) candidate(claim *v1.PersistentVolumeClaim) *storagev1.StorageClass {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil || claim.Annotations[volume.AnnSelectedNode] != "" ||
		claim.Spec.StorageClassName == nil {
		return nil
	}
	driver := c.cfg.DriverName
	if claim.Annotations[annStorageProvisioner] != driver && claim.Annotations[annBetaStorageProvisioner] != driver {
		return nil
	}
	class, err := c.cfg.Classes.Get(*claim.Spec.StorageClassName)
	if err != nil || class.Provisioner != driver ||
		(class.VolumeBindingMode != nil && *class.VolumeBindingMode != storagev1.VolumeBindingImmediate) {
		return nil
	}
	return class
}

// wait is the delay before the next attempt on a claim.
func (c *Claimer) wait(uid types.UID) time.Duration {
	c.mu.Lock()
	n := c.tries[uid]
	c.mu.Unlock()
	if n == 0 {
		return time.Duration(rand.Int64N(int64(c.cfg.Node.BaseDelay) + 1))
	}
	d := c.cfg.Node.BaseDelay << min(n, 30)
	if d <= 0 || d > c.cfg.Node.MaxDelay {
		d = c.cfg.Node.MaxDelay
	}
	// Jitter in [d/2, d): instances that lost together do not retry together.
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (c *Claimer) failed(key cache.ObjectName, uid types.UID) {
	c.mu.Lock()
	c.tries[uid]++
	c.mu.Unlock()
	c.queue.AddAfter(key, c.wait(uid))
}

func (c *Claimer) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.tries, uid)
	c.mu.Unlock()
}

// Run takes claims until ctx ends; call it once, on the instance that
// provisions.
func (c *Claimer) Run(ctx context.Context) {
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

func (c *Claimer) listCandidates() []*v1.PersistentVolumeClaim {
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

func (c *Claimer) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	c.attempt(ctx, key)
	return true
}

// attempt tries once to take a claim for this node; Run's workers call it
// for each claim whose wait is over.
func (c *Claimer) attempt(ctx context.Context, key cache.ObjectName) {
	claim, err := c.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if err != nil {
		return // gone
	}
	class := c.candidate(claim)
	if class == nil {
		c.forget(claim.UID)
		return
	}
	nodeName := c.cfg.Node.NodeName
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim), "node", nodeName)
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
	taken.Annotations[volume.AnnSelectedNode] = nodeName
	// The node's label in the same write: the claim leaves the pool's
	// selection and enters this node's (selection by label).
	if taken.Labels == nil {
		taken.Labels = map[string]string{}
	}
	taken.Labels[nodelabel.Key] = c.cfg.Node.NodeValue()
	_, err = c.cfg.Client.PersistentVolumeClaims(claim.Namespace).Update(ctx, taken, metav1.UpdateOptions{})
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
// must be known, and the provisioner must agree (ClaimerConfig.Check).
func (c *Claimer) ineligible(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) string {
	node, err := c.cfg.Nodes.Get(c.cfg.Node.NodeName)
	if err != nil {
		return fmt.Sprintf("node %q not in the informer yet: %v", c.cfg.Node.NodeName, err)
	}
	return c.cfg.Check(ctx, claim, class, node)
}
