package bindthrough

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config configures a Binder.
type Config struct {
	// DriverName is the CSI driver whose PVs are bound (the PVs' provisioned-by
	// annotation, or their migrated-to annotation for CSI migration).
	DriverName string
	// Client writes PVs and claims.
	Client kubernetes.Interface
	// Volumes and Claims are the informers of PVs and claims the binder reads;
	// it adds event handlers to Volumes.
	Volumes, Claims cache.SharedIndexInformer
	// Workers is the number of pairs bound at once. Default 10.
	Workers int
	// DropFinalizers are finalizers that the claim's binding write also
	// removes when the claim carries them: csi-provisioner's in-flight
	// record, which may go once the claim's PV exists (the PV governs the
	// volume), so that the record costs no write of its own. Finalizers
	// not listed stay.
	DropFinalizers []string
	// RecordWait is how long after a PV's creation a claim that shows none
	// of DropFinalizers while not bound yet is taken for an informer's copy
	// older than the record (which csi-provisioner writes before the PV):
	// the claim's binding write waits for the claim's next event instead of
	// being refused with a conflict. Past it, the claim is bound as shown
	// (the record's keeper removed it, or it never had one). Default 30s;
	// without DropFinalizers there is no wait.
	RecordWait time.Duration
	// RetryForbidden is how long the binder leaves binding to the PV
	// controller after the API refused one of its writes (RBAC). Default 1m.
	RetryForbidden time.Duration
	// Clock, for tests. Default the real one.
	Clock clock.Clock
}

// Binder binds claims to the PVs provisioned for them (see the package
// doc). Its Run may be called once; its methods are safe for concurrent use.
type Binder struct {
	cfg    Config
	pvs    corelisters.PersistentVolumeLister
	claims corelisters.PersistentVolumeClaimLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// forbiddenUntil: while the clock is before it, nothing is written.
	forbiddenUntil time.Time
	// forbiddenLogged: the refusal was logged once in this process.
	forbiddenLogged bool

	// stale holds, by claim UID, the versions of a pair that the informers
	// may still show but the API has replaced (waiting.go).
	stale *staleVersions
}

// New returns a Binder watching cfg.Volumes.
func New(cfg Config) (*Binder, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 10
	}
	if cfg.RetryForbidden <= 0 {
		cfg.RetryForbidden = time.Minute
	}
	if cfg.RecordWait <= 0 {
		cfg.RecordWait = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	b := &Binder{
		cfg:    cfg,
		pvs:    corelisters.NewPersistentVolumeLister(cfg.Volumes.GetIndexer()),
		claims: corelisters.NewPersistentVolumeClaimLister(cfg.Claims.GetIndexer()),
		// Retries back off per PV only, without the controllers' overall
		// 10/s bucket: the writes have a client-side rate limit of their
		// own (Config.Client), and a burst of failures must not wait
		// behind the bucket.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bind-through"}),
		stale: newStaleVersions(),
	}
	if _, err := cfg.Volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.volumeChanged,
		UpdateFunc: func(_, obj any) { b.volumeChanged(obj) },
		DeleteFunc: b.volumeDeleted,
	}); err != nil {
		return nil, fmt.Errorf("watching PVs: %w", err)
	}
	if _, err := cfg.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.claimChanged,
		UpdateFunc: func(_, obj any) { b.claimChanged(obj) },
		DeleteFunc: b.claimDeleted,
	}); err != nil {
		return nil, fmt.Errorf("watching claims: %w", err)
	}
	return b, nil
}

// Retries of a PV whose binding failed (other than by a conflict) back off
// exponentially from retryBase to retryMax.
const (
	retryBase = 100 * time.Millisecond
	retryMax  = 5 * time.Minute
)

// volumeChanged queues a PV of the driver whose claim is not Bound to it
// yet. A PV whose claim the informer does not hold yet waits for the
// claim's add event.
func (b *Binder) volumeChanged(obj any) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" || !provisionedBy(pv, b.cfg.DriverName) {
		return
	}
	claim, err := b.claims.PersistentVolumeClaims(pv.Spec.ClaimRef.Namespace).Get(pv.Spec.ClaimRef.Name)
	if err != nil {
		if skipReason(pv, nil, b.cfg.DriverName) == claimNotFound {
			b.stale.await(pv.Spec.ClaimRef.UID, pv.Name)
		}
		return
	}
	if done(pv, claim) {
		// Once the informers caught up with the binding, its stale
		// versions go.
		b.stale.holds(claim.UID, pv.ResourceVersion, claim.ResourceVersion)
		return
	}
	if skipReason(pv, claim, b.cfg.DriverName) != "" {
		return
	}
	b.queue.Add(pv.Name)
}

// Run binds with cfg.Workers workers until ctx is done; the informers must
// have synced. It first queues every PV whose claim is not yet Bound to it
// (a binding left half done by a stopped process included).
func (b *Binder) Run(ctx context.Context) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "bindThrough")
	ctx = klog.NewContext(ctx, logger)
	defer b.queue.ShutDown()
	logger.Info("Binding claims to their new PVs", "workers", b.cfg.Workers)
	// A PV listed before its claim was in the claims' informer was passed
	// over by volumeChanged: look at every PV once, now that both synced.
	for _, obj := range b.cfg.Volumes.GetStore().List() {
		b.volumeChanged(obj)
	}
	var wg sync.WaitGroup
	for range b.cfg.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, b.work, time.Second) })
	}
	<-ctx.Done()
	b.queue.ShutDown()
	wg.Wait()
}

func (b *Binder) work(ctx context.Context) {
	for b.processNext(ctx) {
	}
}

// processNext binds the next PV of the queue; false once the queue is shut
// down.
func (b *Binder) processNext(ctx context.Context) bool {
	name, quit := b.queue.Get()
	if quit {
		return false
	}
	defer b.queue.Done(name)
	err := b.sync(ctx, name)
	switch {
	case err == nil:
		b.queue.Forget(name)
		b.settled(name)
	case errors.Is(err, errAwaitClaim):
		// The claim's next event queues the PV (stale.await), or the
		// wait's end (recordWait).
		b.queue.Forget(name)
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Another writer was first. The version written against is
		// stale now (bind noted it): a sync that reads it from the
		// informers writes nothing, and the informer's next event of
		// the object queues the PV again. Look once more at once: the
		// informers may hold the newer copy already.
		klog.FromContext(ctx).V(4).Info("Binding raced another writer; trying again from the informers' newer copies", "pv", name, "err", err)
		b.queue.Forget(name)
		b.queue.Add(name)
	case apierrors.IsForbidden(err):
		b.refused(ctx, err)
		b.queue.Forget(name)
	default:
		klog.FromContext(ctx).V(2).Info("Binding a claim to its PV failed; the PV controller or a retry will", "pv", name, "err", err)
		b.queue.AddRateLimited(name)
	}
	return true
}

// settled forgets the stale versions of the PV named name and its claim
// once the informers show newer ones.
func (b *Binder) settled(name string) {
	pv, err := b.pvs.Get(name)
	if err != nil || pv.Spec.ClaimRef == nil {
		return
	}
	if claim, err := b.claim(pv); err == nil && claim != nil {
		b.stale.holds(claim.UID, pv.ResourceVersion, claim.ResourceVersion)
	}
}

// refused leaves binding to the PV controller for cfg.RetryForbidden, and
// says so once per process.
func (b *Binder) refused(ctx context.Context, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forbiddenUntil = b.cfg.Clock.Now().Add(b.cfg.RetryForbidden)
	if !b.forbiddenLogged {
		b.forbiddenLogged = true
		klog.FromContext(ctx).Info("Claims and PVs may not be bound by csi-provisioner (RBAC); leaving binding to the PV controller: "+
			"grant update on persistentvolumes/status, persistentvolumeclaims and persistentvolumeclaims/status to use --bind-through",
			"err", err.Error())
	}
}

func (b *Binder) forbidden() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg.Clock.Now().Before(b.forbiddenUntil)
}

// sync binds the PV named name to its claim, step by step, skipping what is
// written already.
func (b *Binder) sync(ctx context.Context, name string) error {
	if b.forbidden() {
		return nil
	}
	pv, err := b.pvs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	claim, err := b.claim(pv)
	if err != nil || claim == nil {
		return err
	}
	// A copy without a resourceVersion is none the API returned (a
	// controller's own write to the store): a write from it would be
	// applied unconditionally. The object's next event queues the PV.
	if pv.ResourceVersion == "" || claim.ResourceVersion == "" {
		klog.FromContext(ctx).V(4).Info("The informer holds a copy the API never returned; waiting for its event", "pv", name)
		return nil
	}
	// The informers may lag behind a write that replaced these copies
	// (this binder's own, or one it conflicted with): writing from them
	// would conflict. Their next event queues the PV again.
	if b.stale.holds(claim.UID, pv.ResourceVersion, claim.ResourceVersion) {
		return nil
	}
	if skipReason(pv, claim, b.cfg.DriverName) != "" {
		return nil
	}
	return b.bind(ctx, pv, claim)
}

// claim is the claim pv refers to, from the informer; nil when it holds
// none.
func (b *Binder) claim(pv *v1.PersistentVolume) (*v1.PersistentVolumeClaim, error) {
	claim, err := b.claims.PersistentVolumeClaims(pv.Spec.ClaimRef.Namespace).Get(pv.Spec.ClaimRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return claim, err
}

// bind writes the PV's status, the claim and the claim's status, in the PV
// controller's order, each from the copy the previous write returned. The
// versions each write replaced, or found replaced (a conflict), are noted
// stale.
func (b *Binder) bind(ctx context.Context, pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim), "pv", pv.Name)
	if next, dirty := volumeStatusBound(pv); dirty {
		_, err := b.cfg.Client.CoreV1().PersistentVolumes().UpdateStatus(ctx, next, metav1.UpdateOptions{})
		b.noteWritten(claim.UID, pv.Name, err, pv.ResourceVersion, "")
		if err != nil {
			return fmt.Errorf("writing PV %q status Bound: %w", pv.Name, err)
		}
		// Another writer may have changed the claim meanwhile (the
		// in-flight record's keeper, when it did not leave the record's
		// removal to this write): write from the informer's newest copy.
		if claim, err = b.fresher(pv, claim); err != nil || claim == nil {
			return err
		}
	}
	if wait := b.recordWait(pv, claim); wait > 0 {
		b.stale.await(claim.UID, pv.Name)
		// The claim's next event may have come before the await: then
		// there is a newer copy to look at now.
		if now, err := b.claim(pv); err == nil && now != nil && now.ResourceVersion != claim.ResourceVersion {
			b.queue.Add(pv.Name)
		} else {
			b.queue.AddAfter(pv.Name, wait)
		}
		logger.V(5).Info("The claim's copy predates its in-flight record: waiting for its next event", "wait", wait)
		return errAwaitClaim
	}
	if next, dirty := claimBound(claim, pv, b.cfg.DropFinalizers); dirty {
		out, err := b.cfg.Client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, next, metav1.UpdateOptions{})
		b.noteWritten(claim.UID, pv.Name, err, "", claim.ResourceVersion)
		if err != nil {
			return fmt.Errorf("binding claim %s to PV %q: %w", klog.KObj(claim), pv.Name, err)
		}
		claim = out
	}
	next, dirty, err := claimStatusBound(claim, pv)
	if err != nil || !dirty {
		return err
	}
	_, err = b.cfg.Client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	b.noteWritten(claim.UID, pv.Name, err, "", claim.ResourceVersion)
	if err != nil {
		return fmt.Errorf("writing claim %s status Bound: %w", klog.KObj(claim), err)
	}
	logger.V(2).Info("Claim bound to its new PV")
	return nil
}

// errAwaitClaim: the pair waits for the claim's next event (recordWait).
var errAwaitClaim = errors.New("waiting for the claim's next event")

// recordWait is how long the claim's binding write waits for a copy of the
// claim that shows its in-flight record: with Config.DropFinalizers, a
// claim not bound yet that shows none of them while its PV is younger than
// Config.RecordWait is an informer's copy from before the record (the
// record is written before CreateVolume), and a write from it would be
// refused. 0: write now.
func (b *Binder) recordWait(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) time.Duration {
	if len(b.cfg.DropFinalizers) == 0 || claim.Spec.VolumeName != "" ||
		slices.ContainsFunc(claim.Finalizers, func(f string) bool { return slices.Contains(b.cfg.DropFinalizers, f) }) {
		return 0
	}
	// CreationTimestamp is the API server's clock in whole seconds: a skew
	// moves the wait, never what is written.
	return max(0, b.cfg.RecordWait-b.cfg.Clock.Since(pv.CreationTimestamp.Time))
}

// fresher is the informer's copy of claim when it is newer than claim and
// still to be bound to pv; claim otherwise; nil when the pair is no longer
// to be bound.
func (b *Binder) fresher(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	now, err := b.claim(pv)
	if err != nil || now == nil || now.UID != claim.UID || now.ResourceVersion == claim.ResourceVersion ||
		b.stale.holds(claim.UID, "", now.ResourceVersion) {
		return claim, err
	}
	if skipReason(pv, now, b.cfg.DriverName) != "" {
		return nil, nil
	}
	return now, nil
}

// noteWritten notes the PV's or claim's version a write replaced as stale,
// when the write succeeded or found it replaced or deleted already (a
// conflict, not found).
func (b *Binder) noteWritten(claim types.UID, pv string, err error, pvVersion, claimVersion string) {
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		b.stale.note(claim, pv, pvVersion, claimVersion)
	}
}
