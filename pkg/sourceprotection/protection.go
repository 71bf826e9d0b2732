package sourceprotection

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/typed/volumesnapshot/v1"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
)

// Names shared with upstream external-provisioner v6.3.0, so that a fleet
// that mixes both agrees on them.
const (
	// FinalizerCloneSource is on a claim while clones of it are being
	// provisioned.
	FinalizerCloneSource = "provisioner.storage.kubernetes.io/cloning-protection"
	// FinalizerSnapshotSource is on a VolumeSnapshot while volumes are being
	// restored from it. It is the provisioner's own: the snapshot
	// controller's snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection
	// belongs to that controller, which adds and removes it by itself.
	FinalizerSnapshotSource = "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
)

// The data source kinds protected here.
const (
	kindClaim    = "PersistentVolumeClaim"
	kindSnapshot = "VolumeSnapshot"
	// snapshotGroup is the API group of VolumeSnapshot.
	snapshotGroup = snapv1.GroupName
)

// indexDataSource indexes claims by the data source they are made from
// (Key.String()), so that "is a clone of X in flight" costs the
// number of claims made from X, not the number of claims in the cluster.
const indexDataSource = "csi-topology-provisioner/dataSource"

// Key identifies a data source: a claim (Kind PersistentVolumeClaim) or a
// VolumeSnapshot (Kind VolumeSnapshot) in Namespace.
type Key struct {
	Kind, Namespace, Name string
}

// String is the key's index value: kind/namespace/name.
func (k Key) String() string { return k.Kind + "/" + k.Namespace + "/" + k.Name }

// Ref is a claim's data source reference, normalized from spec.dataSource
// and spec.dataSourceRef.
type Ref struct {
	Group, Kind, Name string
	// Namespace is set only by a cross-namespace dataSourceRef.
	Namespace string
}

// ClaimRef returns the claim's data source reference, or nil. The API
// server keeps dataSource and dataSourceRef in step for the kinds both can
// hold; dataSourceRef alone names populators and other namespaces. It is
// the one reading of a claim's source: the provisioner resolves it, and
// the protection index files the claim under it.
func ClaimRef(claim *v1.PersistentVolumeClaim) *Ref {
	if r := claim.Spec.DataSourceRef; r != nil && r.Namespace != nil && *r.Namespace != "" && *r.Namespace != claim.Namespace {
		return &Ref{Group: deref(r.APIGroup), Kind: r.Kind, Name: r.Name, Namespace: *r.Namespace}
	}
	if r := claim.Spec.DataSource; r != nil {
		return &Ref{Group: deref(r.APIGroup), Kind: r.Kind, Name: r.Name}
	}
	if r := claim.Spec.DataSourceRef; r != nil {
		return &Ref{Group: deref(r.APIGroup), Kind: r.Kind, Name: r.Name}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// claimSourceKey is the source a claim is made from, when the provisioner
// serves it (a claim or a VolumeSnapshot of the claim's namespace).
func claimSourceKey(claim *v1.PersistentVolumeClaim) (Key, bool) {
	ref := ClaimRef(claim)
	switch {
	case ref == nil || ref.Namespace != "" || ref.Name == "":
		return Key{}, false
	case ref.Group == "" && ref.Kind == kindClaim, ref.Group == snapshotGroup && ref.Kind == kindSnapshot:
		return Key{Kind: ref.Kind, Namespace: claim.Namespace, Name: ref.Name}, true
	}
	return Key{}, false
}

// claimsBySource is the claim informer's index function for indexDataSource.
func claimsBySource(obj any) ([]string, error) {
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return nil, nil
	}
	if key, ok := claimSourceKey(claim); ok {
		return []string{key.String()}, nil
	}
	return nil, nil
}

// Config configures a Controller.
type Config struct {
	// Claims is the shared claim informer; New adds its
	// index and handlers, so it must not have been started yet.
	Claims cache.SharedIndexInformer
	// ClaimLister reads claims from Claims.
	ClaimLister corelisters.PersistentVolumeClaimLister
	// ClaimClient writes the finalizer of source claims.
	ClaimClient corev1client.PersistentVolumeClaimsGetter
	// Snapshots (an informer not yet started), SnapshotLister and
	// SnapshotClient serve VolumeSnapshot sources; all nil when the
	// VolumeSnapshot API is not installed.
	Snapshots      cache.SharedIndexInformer
	SnapshotLister snaplisters.VolumeSnapshotLister
	SnapshotClient snapclient.VolumeSnapshotsGetter
	// SnapshotAPI, when set, says whether Snapshots runs and has synced
	// (nil: always); until it has, no snapshot's finalizer is judged, and
	// the informer's first list queues every snapshot.
	SnapshotAPI *optionalapi.API
	// Workers is the number of sources processed at once. Default 1.
	Workers int
}

// Controller keeps a finalizer on every data source while a claim
// made from it has no volume yet (FinalizerCloneSource on a source claim,
// FinalizerSnapshotSource on a VolumeSnapshot), so that the source cannot
// go away while the driver copies it, and removes the finalizer once no
// such claim is left: bound, deleted, or never provisioned. The provisioner
// adds the finalizer (Protect) before its CreateVolume; this controller
// removes it, driven by claim and snapshot events, so it also clears
// finalizers left by a restart. Only its Run removes; Protect is safe for
// concurrent use with Run.
type Controller struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[Key]

	// stripes serialize Protect and the removal of one source's finalizer:
	// a removal decided before a new clone appeared cannot hide it.
	stripes [64]sync.Mutex
	mu      sync.Mutex
	// released holds the sources whose finalizer this process removed and
	// whose removal the informer has not shown yet: Protect must write
	// even though its (stale) cache shows the finalizer.
	released map[Key]bool
}

// New registers the claim index and the event handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	s := &Controller{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Key](),
			workqueue.TypedRateLimitingQueueConfig[Key]{Name: "source-protection"}),
		released: map[Key]bool{},
	}
	if err := cfg.Claims.AddIndexers(cache.Indexers{indexDataSource: claimsBySource}); err != nil {
		return nil, fmt.Errorf("indexing claims by data source: %w", err)
	}
	if _, err := cfg.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.claimChanged,
		UpdateFunc: func(_, obj any) { s.claimChanged(obj) },
		DeleteFunc: s.claimChanged,
	}); err != nil {
		return nil, fmt.Errorf("watching claims: %w", err)
	}
	if cfg.Snapshots != nil {
		if _, err := cfg.Snapshots.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    s.snapshotChanged,
			UpdateFunc: func(_, obj any) { s.snapshotChanged(obj) },
		}); err != nil {
			return nil, fmt.Errorf("watching snapshots: %w", err)
		}
	}
	return s, nil
}

// claimChanged queues the source a claim is made from, and the claim
// itself when it carries the cloning-protection finalizer.
func (s *Controller) claimChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if key, ok := claimSourceKey(claim); ok {
		s.queue.Add(key)
	}
	self := Key{Kind: kindClaim, Namespace: claim.Namespace, Name: claim.Name}
	if slices.Contains(claim.Finalizers, FinalizerCloneSource) {
		s.queue.Add(self)
	} else {
		s.seenWithout(self)
	}
}

// seenWithout forgets that this process released a source, once the
// informer shows it without the finalizer.
func (s *Controller) seenWithout(key Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.released, key)
}

func (s *Controller) snapshotChanged(obj any) {
	snap, ok := obj.(*snapv1.VolumeSnapshot)
	if !ok {
		return
	}
	key := Key{Kind: kindSnapshot, Namespace: snap.Namespace, Name: snap.Name}
	if slices.Contains(snap.Finalizers, FinalizerSnapshotSource) {
		s.queue.Add(key)
	} else {
		s.seenWithout(key)
	}
}

func (s *Controller) lock(key Key) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.String()))
	m := &s.stripes[h.Sum32()%uint32(len(s.stripes))]
	m.Lock()
	return m.Unlock
}

// hasPendingClaim reports whether a claim made from the source has no volume yet
// and is not being deleted. Its cost is the number of claims made from the
// source (an index lookup), whatever the number of claims in the cluster.
func (s *Controller) hasPendingClaim(key Key) (bool, error) {
	objs, err := s.cfg.Claims.GetIndexer().ByIndex(indexDataSource, key.String())
	if err != nil {
		return false, err
	}
	for _, obj := range objs {
		if c, ok := obj.(*v1.PersistentVolumeClaim); ok && c.Spec.VolumeName == "" && c.DeletionTimestamp == nil {
			return true, nil
		}
	}
	return false, nil
}

// Protect puts the source's finalizer on it (one API write, none when the
// informer shows it there already). Call it before CreateVolume.
func (s *Controller) Protect(ctx context.Context, key Key) error {
	defer s.lock(key)()
	s.mu.Lock()
	released := s.released[key]
	s.mu.Unlock()
	var err error
	switch key.Kind {
	case kindClaim:
		err = s.protectClaim(ctx, key, released)
	case kindSnapshot:
		err = s.protectSnapshot(ctx, key, released)
	}
	if err == nil {
		s.mu.Lock()
		delete(s.released, key)
		s.mu.Unlock()
	}
	return err
}

func (s *Controller) protectClaim(ctx context.Context, key Key, released bool) error {
	claim, err := s.cfg.ClaimLister.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if err != nil {
		return fmt.Errorf("protecting source claim %s: %w", key, err)
	}
	if slices.Contains(claim.Finalizers, FinalizerCloneSource) && !released {
		return nil
	}
	c := claim.DeepCopy()
	if !slices.Contains(c.Finalizers, FinalizerCloneSource) {
		c.Finalizers = append(c.Finalizers, FinalizerCloneSource)
	}
	if _, err := s.cfg.ClaimClient.PersistentVolumeClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("adding finalizer %s to source claim %s/%s: %w", FinalizerCloneSource, c.Namespace, c.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Protecting clone source", "source", klog.KObj(c), "finalizer", FinalizerCloneSource)
	return nil
}

func (s *Controller) protectSnapshot(ctx context.Context, key Key, released bool) error {
	if s.cfg.SnapshotLister == nil {
		return fmt.Errorf("protecting %s: the VolumeSnapshot API is not served", key)
	}
	snap, err := s.cfg.SnapshotLister.VolumeSnapshots(key.Namespace).Get(key.Name)
	if err != nil {
		return fmt.Errorf("protecting snapshot %s: %w", key, err)
	}
	if slices.Contains(snap.Finalizers, FinalizerSnapshotSource) && !released {
		return nil
	}
	c := snap.DeepCopy()
	if !slices.Contains(c.Finalizers, FinalizerSnapshotSource) {
		c.Finalizers = append(c.Finalizers, FinalizerSnapshotSource)
	}
	_, err = s.cfg.SnapshotClient.VolumeSnapshots(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) {
		// As upstream: a Role from before v6.3.0 may not allow updates of
		// snapshots; restore without the protection rather than not at all.
		klog.FromContext(ctx).Info("Cannot protect the snapshot with a finalizer (RBAC lacks update on volumesnapshots); restoring without protection",
			"snapshot", klog.KObj(c), "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("adding finalizer %s to VolumeSnapshot %s/%s: %w", FinalizerSnapshotSource, c.Namespace, c.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Protecting snapshot source", "snapshot", klog.KObj(c), "finalizer", FinalizerSnapshotSource)
	return nil
}

// Run removes finalizers until ctx is done; wait for the informers' caches
// first.
func (s *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for s.processNext(ctx) {
				}
			}, time.Second)
		})
	}
	wg.Wait()
}

func (s *Controller) processNext(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("Retrying source protection", "source", key.String(), "err", err)
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// sync removes the source's finalizer when no claim made from it is in
// flight.
func (s *Controller) sync(ctx context.Context, key Key) error {
	defer s.lock(key)()
	var (
		obj       metav1.Object
		finalizer string
		err       error
	)
	switch key.Kind {
	case kindClaim:
		finalizer = FinalizerCloneSource
		obj, err = s.cfg.ClaimLister.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	case kindSnapshot:
		if s.cfg.SnapshotLister == nil || (s.cfg.SnapshotAPI != nil && !s.cfg.SnapshotAPI.Ready()) {
			return nil
		}
		finalizer = FinalizerSnapshotSource
		obj, err = s.cfg.SnapshotLister.VolumeSnapshots(key.Namespace).Get(key.Name)
	default:
		return nil
	}
	if apierrors.IsNotFound(err) || (err == nil && !slices.Contains(obj.GetFinalizers(), finalizer)) {
		s.seenWithout(key)
		return nil
	}
	if err != nil {
		return err
	}
	if busy, err := s.hasPendingClaim(key); err != nil || busy {
		return err
	}
	if err := s.removeFinalizer(ctx, key, obj, finalizer); err != nil {
		return err
	}
	s.mu.Lock()
	s.released[key] = true
	s.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("No claim made from the source is in flight any more: finalizer removed", "source", key.String(), "finalizer", finalizer)
	return nil
}

func (s *Controller) removeFinalizer(ctx context.Context, key Key, obj metav1.Object, finalizer string) error {
	var err error
	switch o := obj.(type) {
	case *v1.PersistentVolumeClaim:
		c := o.DeepCopy()
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == finalizer })
		_, err = s.cfg.ClaimClient.PersistentVolumeClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	case *snapv1.VolumeSnapshot:
		c := o.DeepCopy()
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == finalizer })
		_, err = s.cfg.SnapshotClient.VolumeSnapshots(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing finalizer %s from %s: %w", finalizer, key, err)
	}
	return nil
}
