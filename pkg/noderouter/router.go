// Package noderouter is csi-node-router: it writes the node label
// (nodelabel.Key) that csi-provisioner instances of a node deployment with
// --node-deployment-selection=label select their claims and PVs by, where
// no instance writes it: claims the scheduler placed on a node, the pool of
// unselected immediate-binding claims, and the claims and PVs made before
// the label existed (also by upstream external-provisioner). It watches
// every claim, PV and class and the Nodes' metadata, and PATCHes only what
// differs. See docs/node-deployment.md, "Selection by label".
package noderouter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// Config configures a Router.
type Config struct {
	// Driver is the CSI driver whose claims and PVs are labelled.
	Driver string
	// Workers is the number of objects labelled at once. Default 4.
	Workers int
	// ResyncPeriod of the informers. Default 15m.
	ResyncPeriod time.Duration
	// Metrics, when set, receives the router's metrics.
	Metrics metrics.KubeRegistry
}

// Router labels claims and PVs with their node. Start its informers with
// Start (on every replica, so that a new leader starts warm), then label
// with Run (on the leader only).
type Router struct {
	cfg      Config
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	nodes    cache.SharedIndexInformer
	claims   corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	queue    workqueue.TypedRateLimitingInterface[key]
	recorder record.EventRecorder
	metrics  *routerMetrics
	synced   atomic.Bool

	mu sync.Mutex
	// unplaced are the PVs of the driver without a label whose node is
	// not known, by name, with the reason (logged and posted once).
	unplaced map[string]string
}

// key is a claim (namespace and name) or a PV (name only).
type key struct {
	pv              bool
	namespace, name string
}

// byHostname indexes Nodes by their kubernetes.io/hostname label.
const byHostname = "hostname"

// New wires a Router; meta watches Nodes as metadata only.
func New(ctx context.Context, cfg Config, client kubernetes.Interface, meta metadata.Interface) (*Router, error) {
	if cfg.Driver == "" {
		return nil, fmt.Errorf("the driver name is empty")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 15 * time.Minute
	}
	r := &Router{cfg: cfg, client: client, metrics: newMetrics(cfg.Metrics), unplaced: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "noderouter"})}
	dropManaged := func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		return obj, nil
	}
	r.factory = informers.NewSharedInformerFactoryWithOptions(client, cfg.ResyncPeriod, informers.WithTransform(dropManaged))
	claims := r.factory.Core().V1().PersistentVolumeClaims()
	pvs := r.factory.Core().V1().PersistentVolumes()
	classes := r.factory.Storage().V1().StorageClasses()
	r.claims, r.pvs, r.classes = claims.Lister(), pvs.Lister(), classes.Lister()
	r.nodes = metadatainformer.NewFilteredMetadataInformer(meta, v1.SchemeGroupVersion.WithResource("nodes"), metav1.NamespaceAll,
		cfg.ResyncPeriod, cache.Indexers{byHostname: hostnameIndex}, nil).Informer()
	_ = r.nodes.SetTransform(dropManaged)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: client.CoreV1().Events("")})
	r.recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "csi-node-router"})
	if err := r.addHandlers(claims.Informer(), pvs.Informer(), classes.Informer()); err != nil {
		return nil, err
	}
	return r, nil
}

func hostnameIndex(obj any) ([]string, error) {
	if o, ok := obj.(metav1.Object); ok {
		if h, ok := o.GetLabels()[v1.LabelHostname]; ok {
			return []string{h}, nil
		}
	}
	return nil, nil
}

func (r *Router) addHandlers(claims, pvs, classes cache.SharedIndexInformer) error {
	onClaim := func(obj any) {
		if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
			r.queue.Add(key{namespace: c.Namespace, name: c.Name})
		}
	}
	onPV := func(obj any) {
		pv, ok := obj.(*v1.PersistentVolume)
		if !ok || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.cfg.Driver {
			return
		}
		r.queue.Add(key{pv: true, name: pv.Name})
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }}); err != nil {
		return fmt.Errorf("watching claims: %w", err)
	}
	if _, err := pvs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPV, UpdateFunc: func(_, o any) { onPV(o) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pv, ok := obj.(*v1.PersistentVolume); ok {
				r.setPlaced(pv.Name)
			}
		}}); err != nil {
		return fmt.Errorf("watching PVs: %w", err)
	}
	// A class that appears or changes changes what its claims want; a node
	// that appears or is relabelled may be the one an unlabelled PV names.
	if _, err := classes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { r.queueAllClaims() },
		UpdateFunc: func(any, any) { r.queueAllClaims() }}); err != nil {
		return fmt.Errorf("watching storage classes: %w", err)
	}
	if _, err := r.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { r.queueUnplaced() },
		UpdateFunc: func(old, obj any) {
			if o, n := old.(metav1.Object), obj.(metav1.Object); !labels.Equals(o.GetLabels(), n.GetLabels()) {
				r.queueUnplaced()
			}
		}, DeleteFunc: func(any) { r.queueUnplaced() }}); err != nil {
		return fmt.Errorf("watching nodes: %w", err)
	}
	return nil
}

// queueAllClaims queues every claim in the cache; the label is written
// only where it differs.
func (r *Router) queueAllClaims() {
	claims, _ := r.claims.List(labels.Everything())
	for _, c := range claims {
		r.queue.Add(key{namespace: c.Namespace, name: c.Name})
	}
}

func (r *Router) queueUnplaced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.unplaced {
		r.queue.Add(key{pv: true, name: name})
	}
}

// Start starts the informers and waits for their caches.
func (r *Router) Start(ctx context.Context) error {
	r.factory.Start(ctx.Done())
	go r.nodes.RunWithContext(ctx)
	for typ, ok := range r.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), r.nodes.HasSynced) {
		return fmt.Errorf("informer cache of nodes did not sync")
	}
	r.synced.Store(true)
	return nil
}

// Synced reports whether Start has synced the caches (serve it as /readyz).
func (r *Router) Synced() bool { return r.synced.Load() }

// Shutdown stops the informers of Start once its context has ended.
func (r *Router) Shutdown() { r.factory.Shutdown() }

// Run labels until ctx ends: first everything in the cache (what changed
// while no replica led), then what changes. Call it once, after Start.
func (r *Router) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	r.queueAllClaims()
	pvs, _ := r.pvs.List(labels.Everything())
	for _, pv := range pvs {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == r.cfg.Driver {
			r.queue.Add(key{pv: true, name: pv.Name})
		}
	}
	klog.FromContext(ctx).Info("Labelling claims and PVs with their node", "driver", r.cfg.Driver, "label", nodelabel.Key,
		"queued", r.queue.Len())
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for r.next(ctx) {
			}
		})
	}
	wg.Wait()
}

func (r *Router) next(ctx context.Context) bool {
	k, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(k)
	var err error
	if k.pv {
		err = r.syncVolume(ctx, k.name)
	} else {
		err = r.syncClaim(ctx, k.namespace, k.name)
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Labelling failed, retrying", "object", k.namespace+"/"+k.name, "err", err)
		r.queue.AddRateLimited(k)
		return true
	}
	r.queue.Forget(k)
	return true
}

// labelPatch sets (or, for "", removes) the node label, conditioned on the
// object's resourceVersion: a label computed from an old version is not
// written over a newer one (the newer version is looked at next).
func labelPatch(resourceVersion, value string) []byte {
	var v any
	if value != "" {
		v = value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion, "labels": map[string]any{nodelabel.Key: v}}})
	return patch
}

// patchResult names the outcome of a PATCH for the metric; a conflict or a
// gone object is not an error (the informer brings the news).
func (r *Router) patchResult(resource string, err error) error {
	switch {
	case err == nil:
		r.metrics.observePatch(resource, "success")
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		r.metrics.observePatch(resource, "conflict")
		return nil
	default:
		r.metrics.observePatch(resource, "error")
		return err
	}
}

func (r *Router) syncClaim(ctx context.Context, namespace, name string) error {
	claim, err := r.claims.PersistentVolumeClaims(namespace).Get(name)
	if err != nil || claim.Spec.StorageClassName == nil {
		return nil
	}
	class, err := r.classes.Get(*claim.Spec.StorageClassName)
	if err != nil {
		class = nil
	}
	w := claimLabel(r.cfg.Driver, claim, class)
	if w.keep || claim.Labels[nodelabel.Key] == w.value {
		return nil
	}
	_, err = r.client.CoreV1().PersistentVolumeClaims(namespace).Patch(ctx, name, types.MergePatchType,
		labelPatch(claim.ResourceVersion, w.value), metav1.PatchOptions{FieldManager: "csi-node-router"})
	klog.FromContext(ctx).V(3).Info("Labelled claim", "pvc", klog.KObj(claim), "value", w.value, "err", err)
	return r.patchResult("persistentvolumeclaims", err)
}

// syncVolume labels a PV of the driver without the label with the node its
// node affinity names, when exactly one node satisfies it; a labelled PV is
// left alone (its instance labelled it).
func (r *Router) syncVolume(ctx context.Context, name string) error {
	pv, err := r.pvs.Get(name)
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.cfg.Driver {
		return nil
	}
	if _, ok := pv.Labels[nodelabel.Key]; ok {
		r.setPlaced(name)
		return nil
	}
	nodes := volumeNodes(pv, r.candidates(pv))
	if len(nodes) != 1 {
		r.setUnplaced(ctx, pv, nodes)
		return nil
	}
	r.setPlaced(name)
	_, err = r.client.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType,
		labelPatch(pv.ResourceVersion, nodelabel.NodeValue(nodes[0])), metav1.PatchOptions{FieldManager: "csi-node-router"})
	klog.FromContext(ctx).V(3).Info("Labelled PV", "pv", name, "node", nodes[0], "err", err)
	return r.patchResult("persistentvolumes", err)
}

// candidates are the nodes that may satisfy the PV's node affinity: those
// with the hostname it names, or every node.
func (r *Router) candidates(pv *v1.PersistentVolume) []*metav1.PartialObjectMetadata {
	var objs []any
	if names, ok := hostnames(pv); ok {
		for _, h := range names {
			got, _ := r.nodes.GetIndexer().ByIndex(byHostname, h)
			objs = append(objs, got...)
		}
	} else {
		objs = r.nodes.GetStore().List()
	}
	out := make([]*metav1.PartialObjectMetadata, 0, len(objs))
	for _, o := range objs {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok {
			out = append(out, m)
		}
	}
	return out
}

func (r *Router) setUnplaced(ctx context.Context, pv *v1.PersistentVolume, nodes []string) {
	why := "no node satisfies its node affinity"
	switch {
	case pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil:
		why = "it has no node affinity (reachable from every node)"
	case len(nodes) > 1:
		why = fmt.Sprintf("more than one node satisfies its node affinity (%s, %s, ...)", nodes[0], nodes[1])
	}
	r.mu.Lock()
	old, known := r.unplaced[pv.Name]
	r.unplaced[pv.Name] = why
	n := len(r.unplaced)
	r.mu.Unlock()
	r.metrics.setUnplaced(n)
	if known && old == why {
		return
	}
	klog.FromContext(ctx).Info("PV of the driver not labelled with a node: no instance sees it with selection by label", "pv", pv.Name, "reason", why)
	r.recorder.Eventf(pv, v1.EventTypeWarning, "NodeNotKnown",
		"Not labelled %s: %s; with --node-deployment-selection=label no csi-provisioner instance deletes this volume (selection by label is for node-local storage)",
		nodelabel.Key, why)
}

func (r *Router) setPlaced(name string) {
	r.mu.Lock()
	_, known := r.unplaced[name]
	delete(r.unplaced, name)
	n := len(r.unplaced)
	r.mu.Unlock()
	if known {
		r.metrics.setUnplaced(n)
	}
}
