package inflight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// recordWorkers is how many deleted claims' records are cleared at once.
const recordWorkers = 8

// Outcome says what clearing a record did; it is the outcome label of the
// in_flight_records_cleared_total metric.
type Outcome string

// Outcomes of clearing a record.
const (
	// OutcomePVExists: the claim has a PV, which governs the volume.
	OutcomePVExists Outcome = "pv_exists"
	// OutcomeDeleted: the volume of the claim's name was deleted.
	OutcomeDeleted Outcome = "deleted"
	// OutcomeNothingCreated: the driver has no volume of that name.
	OutcomeNothingCreated Outcome = "nothing_created"
	// OutcomeAbandoned: the volume's ID could not be learnt (an
	// InFlightVolumeAbandoned Event says why).
	OutcomeAbandoned Outcome = "abandoned"
)

// Volumes is what the record needs of the provisioner's core, which owns
// the driver, the classes and the volume names. It must be safe for
// concurrent use.
type Volumes interface {
	// VolumeName returns the deterministic name of the claim's volume,
	// which its PV also has.
	VolumeName(claim *v1.PersistentVolumeClaim) string
	// Class returns the claim's StorageClass when it still exists and is
	// of the driver (a class of the in-tree plugin the driver replaces
	// comes translated to CSI), else nil.
	Class(ctx context.Context, claim *v1.PersistentVolumeClaim) *storagev1.StorageClass
	// Clear deletes the volume a deleted claim's record says may exist
	// (class is nil when it is gone) and returns OutcomeDeleted with the
	// volume's ID, OutcomeNothingCreated, or OutcomeAbandoned with the
	// reason; an error means that a retry may do better.
	Clear(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (Outcome, string, error)
}

// ClaimVolumes finds the PVs that refer to a claim by the UID in their
// claimRef, from the PV informer.
type ClaimVolumes interface {
	Of(uid types.UID) []*v1.PersistentVolume
}

// KeeperConfig configures a Keeper. Every field but Metrics is required.
type KeeperConfig struct {
	// Records is the record whose claims the keeper clears (non-nil).
	Records *Records
	// Volumes is the core's side of clearing.
	Volumes Volumes
	// Claims is the claim informer; the keeper adds its handlers.
	Claims cache.SharedIndexInformer
	// ClaimVolumes finds a claim's PVs.
	ClaimVolumes ClaimVolumes
	// Recorder posts the record's Events on claims.
	Recorder record.EventRecorder
	// Metrics, when set, gets the record's metrics.
	Metrics metrics.KubeRegistry
	// DriverName is the driver whose claims RemoveAll looks at.
	DriverName string
	// BinderGrace, when above 0, leaves the record of a live claim that is
	// not bound yet to bind-through (pkg/bindthrough, whose claim write
	// removes it in the same request that binds the claim) for up to this
	// long after its PV's creation; then, or as soon as the claim is bound
	// without it going, the keeper removes it. 0: the keeper removes it as
	// soon as the PV is in the informer.
	BinderGrace time.Duration
}

// Keeper clears in-flight records: a claim that carries Finalizer has it
// removed as soon as the informer shows a PV for it (or, with
// KeeperConfig.BinderGrace, by bind-through's binding write; the PV governs the
// volume, and upstream external-provisioner, which never removes the
// finalizer, can take over after a rollback), and a claim being deleted
// without a PV once the volume of its name is deleted (Volumes.Clear). It
// runs only while this replica leads, and Reconcile clears every deleted
// claim before the library starts provisioning. It also counts the open
// records (claims with the finalizer and no bound volume). Safe for
// concurrent use.
type Keeper struct {
	records  *Records
	volumes  Volumes
	claims   cache.SharedIndexInformer
	pvs      ClaimVolumes
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	metrics  *keeperMetrics
	driver   string
	grace    time.Duration

	mu   sync.Mutex
	open map[types.UID]bool
	// released holds the live claims whose record is being or was
	// removed, until the informer shows them without it: a claim or PV
	// event in between, from a cache that has not seen the removal yet,
	// does not send the removal again.
	released map[types.UID]bool
}

// NewKeeper watches cfg.Claims for the records of cfg.Records.
func NewKeeper(cfg KeeperConfig) (*Keeper, error) {
	if cfg.Records == nil || cfg.Volumes == nil || cfg.Claims == nil || cfg.ClaimVolumes == nil || cfg.Recorder == nil {
		return nil, errors.New("in-flight record keeper: Records, Volumes, Claims, ClaimVolumes and Recorder are required")
	}
	k := &Keeper{
		records: cfg.Records, volumes: cfg.Volumes, claims: cfg.Claims, pvs: cfg.ClaimVolumes, recorder: cfg.Recorder, driver: cfg.DriverName,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Second, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "inflightrecords"}),
		metrics:  newKeeperMetrics(cfg.Metrics),
		grace:    cfg.BinderGrace,
		open:     map[types.UID]bool{},
		released: map[types.UID]bool{},
	}
	if _, err := cfg.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.observe(obj) },
		UpdateFunc: func(old, obj any) {
			k.countRemovedByBinder(old, obj)
			k.observe(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				k.setOpen(c.UID, false)
				k.forgetReleased(c.UID)
				k.records.done(c.UID, false)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching claims for in-flight records: %w", err)
	}
	return k, nil
}

// observe counts a claim's record and queues a claim that has one and is
// deleted or has a PV.
func (k *Keeper) observe(obj any) {
	c, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	// With node deployment, the records of other nodes' claims are
	// their instances' business.
	has := HasFinalizer(c) && k.records.owns(c)
	k.setOpen(c.UID, has && c.Spec.VolumeName == "")
	if !HasFinalizer(c) {
		k.forgetReleased(c.UID)
	}
	if has && (c.DeletionTimestamp != nil || k.pvShown(c)) {
		k.queue.Add(cache.MetaObjectToName(c))
	}
}

// countRemovedByBinder counts a record that went from a live claim in the
// write that bound it (bind-through, see KeeperConfig.BinderGrace), not by
// the keeper, as cleared with OutcomePVExists.
func (k *Keeper) countRemovedByBinder(oldObj, obj any) {
	old, ok1 := oldObj.(*v1.PersistentVolumeClaim)
	c, ok2 := obj.(*v1.PersistentVolumeClaim)
	if !ok1 || !ok2 || !HasFinalizer(old) || HasFinalizer(c) || c.DeletionTimestamp != nil || c.Spec.VolumeName == "" ||
		!k.records.owns(c) {
		return
	}
	k.mu.Lock()
	mine := k.released[c.UID]
	k.mu.Unlock()
	if !mine {
		k.metrics.clearedOne(OutcomePVExists)
	}
}

// WatchVolumes queues the claim a PV refers to whenever the PV is added or
// changed, so that the claim's record goes as soon as its PV is in the
// informer, whichever of the two the informers see first.
func (k *Keeper) WatchVolumes(volumes cache.SharedIndexInformer) error {
	queue := func(obj any) {
		if pv, ok := obj.(*v1.PersistentVolume); ok && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID != "" {
			k.queue.Add(cache.ObjectName{Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name})
		}
	}
	if _, err := volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    queue,
		UpdateFunc: func(_, obj any) { queue(obj) },
	}); err != nil {
		return fmt.Errorf("watching PVs for in-flight records: %w", err)
	}
	return nil
}

func (k *Keeper) setOpen(uid types.UID, open bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if open {
		k.open[uid] = true
	} else {
		delete(k.open, uid)
	}
	k.metrics.setOpen(len(k.open))
}

// OpenRecords counts the claims of the keeper's records that are open (the
// in_flight_records metric).
func (k *Keeper) OpenRecords() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.open)
}

// markReleased marks a live claim's record as removed, and reports false
// when it was already (the cache has not shown the removal yet).
func (k *Keeper) markReleased(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released[uid] {
		return false
	}
	k.released[uid] = true
	return true
}

func (k *Keeper) forgetReleased(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.released, uid)
}

// Reconcile clears the records of every deleted claim in the cache before
// new work starts (on start and on each leader change); records it cannot
// clear now are queued for retry.
func (k *Keeper) Reconcile(ctx context.Context) {
	var pending []cache.ObjectName
	for _, obj := range k.claims.GetStore().List() {
		if c, ok := obj.(*v1.PersistentVolumeClaim); ok && HasFinalizer(c) && c.DeletionTimestamp != nil && k.records.owns(c) {
			pending = append(pending, cache.MetaObjectToName(c))
		}
	}
	if len(pending) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("Clearing in-flight records of deleted claims before provisioning", "claims", len(pending))
	work := make(chan cache.ObjectName)
	var wg sync.WaitGroup
	for range min(recordWorkers, len(pending)) {
		wg.Go(func() {
			for key := range work {
				if err := k.sync(ctx, key); err != nil {
					logger.Error(err, "Clearing in-flight record, will retry", "pvc", key)
					k.queue.AddRateLimited(key)
				}
			}
		})
	}
	for _, key := range pending {
		work <- key
	}
	close(work)
	wg.Wait()
}

// Run clears records from the queue until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range recordWorkers {
		wg.Go(func() {
			for k.next(ctx) {
			}
		})
	}
	wg.Wait()
}

// errRetryLater: the record cannot be cleared yet (a provision is running,
// or a PV just returned has not reached the informer).
var errRetryLater = errors.New("retry later")

func (k *Keeper) next(ctx context.Context) bool {
	key, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(key)
	err := k.sync(ctx, key)
	switch {
	case errors.Is(err, errRetryLater):
		k.queue.AddAfter(key, time.Second)
	case err != nil:
		klog.FromContext(ctx).Error(err, "Clearing in-flight record, will retry", "pvc", key)
		k.queue.AddRateLimited(key)
	default:
		k.queue.Forget(key)
	}
	return true
}

// sync clears the record of one claim, if it has one and either a PV in
// the informer or a deletion timestamp.
func (k *Keeper) sync(ctx context.Context, key cache.ObjectName) error {
	obj, exists, err := k.claims.GetStore().GetByKey(key.String())
	if err != nil || !exists {
		return err
	}
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok || !HasFinalizer(claim) || !k.records.owns(claim) {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	if claim.DeletionTimestamp == nil {
		// A live claim: its record goes once its PV exists; until then
		// it is open and stays.
		if !k.pvShown(claim) {
			return nil
		}
		if wait := k.binderWait(claim); wait > 0 {
			k.queue.AddAfter(key, wait)
			return nil
		}
		if !k.markReleased(claim.UID) {
			return nil
		}
		// Marked before the PATCH: the informer's event of the
		// removal, which unmarks, may come before the PATCH returns.
		if err := k.release(ctx, claim, OutcomePVExists); err != nil {
			k.forgetReleased(claim.UID)
			return err
		}
		return nil
	}
	if k.hasPV(claim) {
		return k.release(ctx, claim, OutcomePVExists)
	}
	if k.records.recentlySucceeded(claim.UID) {
		return errRetryLater
	}
	done, ok := k.records.tryClaim(claim.UID)
	if !ok {
		return errRetryLater
	}
	defer done()
	outcome, detail, err := k.volumes.Clear(ctx, claim, k.volumes.Class(ctx, claim))
	if err != nil {
		return err
	}
	name := k.volumes.VolumeName(claim)
	switch outcome {
	case OutcomeDeleted:
		k.recorder.Eventf(claim, v1.EventTypeNormal, ReasonInFlightVolumeDeleted,
			"Deleted volume %q (ID %q), created for this claim before it was deleted and never given a PV", name, detail)
	case OutcomeAbandoned:
		logger.Error(nil, "Removing the in-flight record without knowing that the volume is gone", "volume", name, "reason", detail)
		k.recorder.Eventf(claim, v1.EventTypeWarning, ReasonInFlightVolumeAbandoned,
			"Volume %q may remain in the driver without a PV: %s. Check the storage system and delete it there if it exists", name, detail)
	}
	return k.release(ctx, claim, outcome)
}

// binderWait is how long the record of a live claim whose PV exists is
// left to bind-through's claim write (KeeperConfig.BinderGrace): the rest of
// the grace from its PV's creation while the claim is not bound; 0 when the
// keeper removes it now.
func (k *Keeper) binderWait(claim *v1.PersistentVolumeClaim) time.Duration {
	if k.grace <= 0 || claim.Spec.VolumeName != "" {
		return 0
	}
	var oldest time.Time
	for _, pv := range k.pvs.Of(claim.UID) {
		// A PV without a creation time is the copy its creator sent,
		// not the API's: it was created just now.
		t := pv.CreationTimestamp.Time
		if t.IsZero() {
			t = time.Now()
		}
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	// CreationTimestamp is the API server's clock, in whole seconds: a
	// skew only moves the keeper's removal, never the claim's safety.
	return max(0, k.grace-time.Since(oldest))
}

// hasPV reports whether the claim's volume is governed by a PV: the claim
// is bound, or the PV of its deterministic name refers to it.
func (k *Keeper) hasPV(claim *v1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName != "" || k.pvShown(claim)
}

// pvShown reports whether the PV informer holds a PV that refers to the
// claim (claimRef UID), whatever its name: the one the claim is bound to,
// the PV of its volume's name, or one an older build named
// pvc-<claim UID>.
func (k *Keeper) pvShown(claim *v1.PersistentVolumeClaim) bool {
	return len(k.pvs.Of(claim.UID)) > 0
}

// release removes the claim's record: one PATCH (or UPDATE, see
// ClaimWriter), with the claim's UID as precondition so that a new claim of
// the same name keeps its own.
func (k *Keeper) release(ctx context.Context, claim *v1.PersistentVolumeClaim, outcome Outcome) error {
	_, err := k.records.writes.Write(ctx, claim, dropRecord(claim.UID))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing finalizer %s: %w", Finalizer, err)
	}
	k.records.done(claim.UID, false)
	k.metrics.clearedOne(outcome)
	msg := "Removed the in-flight record of a deleted claim"
	if outcome == OutcomePVExists {
		msg = "Removed the in-flight record: the claim's PV exists"
	}
	klog.FromContext(ctx).V(2).Info(msg, "outcome", outcome, "deleting", claim.DeletionTimestamp != nil)
	return nil
}

// DropAbsent removes the record of every claim whose last CreateVolume said
// that no volume of its name exists (see VolumeAbsent). While the process
// runs such a record stays until the claim's next attempt, which writes it
// again; a process that stops leaves none behind for upstream
// external-provisioner, which never removes it. It returns how many went.
func (k *Keeper) DropAbsent(ctx context.Context) int {
	n := 0
	for _, claim := range k.records.absentClaims() {
		done, ok := k.records.tryClaim(claim.UID)
		if !ok {
			continue
		}
		logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
		if err := k.release(klog.NewContext(ctx, logger), claim, OutcomeNothingCreated); err != nil {
			logger.Error(err, "Keeping the in-flight record")
		} else {
			n++
		}
		done()
	}
	return n
}
