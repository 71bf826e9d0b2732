package provisioner

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// recordWorkers is how many deleted claims' records are cleared at once.
const recordWorkers = 8

// inFlightRecordKeeper clears in-flight records: a claim that carries
// InFlightRecordFinalizer has its finalizer removed as soon as the informer shows
// a PV for it (the PV governs the volume, and upstream external-provisioner,
// which never removes the finalizer, can take over after a rollback), and a
// claim being deleted without a PV once the volume of its name is deleted
// (see Provisioner.clearVolume). It runs only while this replica leads, and
// reconcile clears every deleted claim before the library starts
// provisioning. It also counts the open records (claims with the finalizer
// and no bound volume). Safe for concurrent use.
type inFlightRecordKeeper struct {
	p      *Provisioner
	claims cache.SharedIndexInformer
	// pvs finds a claim's PVs by the claimRef UID (pvShown).
	pvs      *ClaimVolumeIndex
	classes  storagelisters.StorageClassLister
	patcher  corev1client.PersistentVolumeClaimsGetter
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	metrics  *inFlightRecordMetrics

	mu   sync.Mutex
	open map[types.UID]bool
	// released holds the live claims whose record is being or was
	// removed, until the informer shows them without it: a claim or PV
	// event in between, from a cache that has not seen the removal yet,
	// does not send the removal again.
	released map[types.UID]bool
}

// inFlightRecordMetrics are the in-flight record's metrics. A nil *inFlightRecordMetrics
// records nothing.
type inFlightRecordMetrics struct {
	open    *metrics.Gauge
	cleared *metrics.CounterVec
}

func newInFlightRecordMetrics(reg metrics.KubeRegistry) *inFlightRecordMetrics {
	if reg == nil {
		return nil
	}
	m := &inFlightRecordMetrics{
		open: metrics.NewGauge(&metrics.GaugeOpts{Subsystem: metricsSubsystem, Name: "in_flight_records",
			Help: "Claims carrying the in-flight finalizer (" + InFlightRecordFinalizer + ") without a bound volume: a volume of their name may exist without a PV."}),
		cleared: metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: metricsSubsystem, Name: "in_flight_records_cleared_total",
			Help: "In-flight records removed, by outcome: pv_exists (the claim has a PV, which governs the volume), deleted (the volume was deleted), nothing_created (the driver had no volume of that name), abandoned (the volume's ID could not be learnt; see the claim's InFlightVolumeAbandoned Event)."},
			[]string{"outcome"}),
	}
	reg.MustRegister(m.open, m.cleared)
	return m
}

func (m *inFlightRecordMetrics) setOpen(n int) {
	if m != nil {
		m.open.Set(float64(n))
	}
}

func (m *inFlightRecordMetrics) clearedOne(o clearOutcome) {
	if m != nil {
		m.cleared.WithLabelValues(string(o)).Inc()
	}
}

// newInFlightRecordKeeper watches claims for the records of p (which must have the
// record on).
func newInFlightRecordKeeper(ctx context.Context, p *Provisioner, claims cache.SharedIndexInformer, pvs *ClaimVolumeIndex,
	classes storagelisters.StorageClassLister, patcher corev1client.PersistentVolumeClaimsGetter, events kubernetes.Interface,
	reg metrics.KubeRegistry) (*inFlightRecordKeeper, error) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: events.CoreV1().Events("")})
	k := &inFlightRecordKeeper{
		p: p, claims: claims, pvs: pvs, classes: classes, patcher: patcher,
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: contract.InFlightEventComponent}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Second, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "inflightrecords"}),
		metrics:  newInFlightRecordMetrics(reg),
		open:     map[types.UID]bool{},
		released: map[types.UID]bool{},
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(obj) },
		UpdateFunc: func(_, obj any) { k.observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*v1.PersistentVolumeClaim); ok {
				k.setOpen(c.UID, false)
				k.forgetReleased(c.UID)
				p.records.done(c.UID, false)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching claims for in-flight records: %w", err)
	}
	return k, nil
}

// observe counts a claim's record and queues a claim that has one and is
// deleted or has a PV.
func (k *inFlightRecordKeeper) observe(obj any) {
	c, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	// With node deployment, the records of other nodes' claims are
	// their instances' business.
	has := HasInFlightFinalizer(c) && k.p.cfg.Node.ownsClaim(c)
	k.setOpen(c.UID, has && c.Spec.VolumeName == "")
	if !HasInFlightFinalizer(c) {
		k.forgetReleased(c.UID)
	}
	if has && (c.DeletionTimestamp != nil || k.pvShown(c)) {
		k.queue.Add(cache.MetaObjectToName(c))
	}
}

// watchVolumes queues the claim a PV refers to whenever the PV is added or
// changed, so that the claim's record goes as soon as its PV is in the
// informer, whichever of the two the informers see first.
func (k *inFlightRecordKeeper) watchVolumes(volumes cache.SharedIndexInformer) error {
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

func (k *inFlightRecordKeeper) setOpen(uid types.UID, open bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if open {
		k.open[uid] = true
	} else {
		delete(k.open, uid)
	}
	k.metrics.setOpen(len(k.open))
}

// markReleased marks a live claim's record as removed, and reports false
// when it was already (the cache has not shown the removal yet).
func (k *inFlightRecordKeeper) markReleased(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released[uid] {
		return false
	}
	k.released[uid] = true
	return true
}

func (k *inFlightRecordKeeper) forgetReleased(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.released, uid)
}

// reconcile clears the records of every deleted claim in the cache before
// new work starts (on start and on each leader change); records it cannot
// clear now are queued for retry.
func (k *inFlightRecordKeeper) reconcile(ctx context.Context) {
	var pending []cache.ObjectName
	for _, obj := range k.claims.GetStore().List() {
		if c, ok := obj.(*v1.PersistentVolumeClaim); ok && HasInFlightFinalizer(c) && c.DeletionTimestamp != nil && k.p.cfg.Node.ownsClaim(c) {
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

// run clears records from the queue until ctx ends.
func (k *inFlightRecordKeeper) run(ctx context.Context) {
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

func (k *inFlightRecordKeeper) next(ctx context.Context) bool {
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
func (k *inFlightRecordKeeper) sync(ctx context.Context, key cache.ObjectName) error {
	obj, exists, err := k.claims.GetStore().GetByKey(key.String())
	if err != nil || !exists {
		return err
	}
	claim, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok || !HasInFlightFinalizer(claim) || !k.p.cfg.Node.ownsClaim(claim) {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	if claim.DeletionTimestamp == nil {
		// A live claim: its record goes once its PV exists; until then
		// it is open and stays.
		if !k.pvShown(claim) || !k.markReleased(claim.UID) {
			return nil
		}
		// Marked before the PATCH: the informer's event of the
		// removal, which unmarks, may come before the PATCH returns.
		if err := k.release(ctx, claim, clearMoot); err != nil {
			k.forgetReleased(claim.UID)
			return err
		}
		return nil
	}
	if k.hasPV(claim) {
		return k.release(ctx, claim, clearMoot)
	}
	if k.p.records.recentlySucceeded(claim.UID) {
		return errRetryLater
	}
	done, ok := k.p.records.tryClaim(claim.UID)
	if !ok {
		return errRetryLater
	}
	defer done()
	outcome, detail, err := k.p.clearVolume(ctx, claim, k.class(ctx, claim))
	if err != nil {
		return err
	}
	name := k.p.pvName(claim)
	switch outcome {
	case clearDeleted:
		k.recorder.Eventf(claim, v1.EventTypeNormal, ReasonInFlightVolumeDeleted,
			"Deleted volume %q (ID %q), created for this claim before it was deleted and never given a PV", name, detail)
	case clearAbandoned:
		logger.Error(nil, "Removing the in-flight record without knowing that the volume is gone", "volume", name, "reason", detail)
		k.recorder.Eventf(claim, v1.EventTypeWarning, ReasonInFlightVolumeAbandoned,
			"Volume %q may remain in the driver without a PV: %s. Check the storage system and delete it there if it exists", name, detail)
	}
	return k.release(ctx, claim, outcome)
}

// hasPV reports whether the claim's volume is governed by a PV: the claim
// is bound, or the PV of its deterministic name refers to it.
func (k *inFlightRecordKeeper) hasPV(claim *v1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName != "" || k.pvShown(claim)
}

// pvShown reports whether the PV informer holds a PV that refers to the
// claim (claimRef UID), whatever its name: the one the claim is bound to,
// the PV of its volume's name (pvName), or one an older build named
// pvc-<claim UID>.
func (k *inFlightRecordKeeper) pvShown(claim *v1.PersistentVolumeClaim) bool {
	return len(k.pvs.Of(claim.UID)) > 0
}

// class returns the claim's StorageClass if it still exists and is of this
// driver (a class of the in-tree plugin the driver replaces: translated to
// CSI, as for provisioning), else nil.
func (k *inFlightRecordKeeper) class(ctx context.Context, claim *v1.PersistentVolumeClaim) *storagev1.StorageClass {
	name := ""
	if claim.Spec.StorageClassName != nil {
		name = *claim.Spec.StorageClassName
	}
	class, err := k.classes.Get(name)
	if err != nil {
		return nil
	}
	if k.p.migration.servesClass(class) {
		if class, err = k.p.migration.translateClass(klog.FromContext(ctx), class); err != nil {
			return nil
		}
		return class
	}
	if class.Provisioner != k.p.cfg.DriverName {
		return nil
	}
	return class
}

// release removes the claim's record: one PATCH (or UPDATE, see
// claimWriter), with the claim's UID as precondition so that a new claim of
// the same name keeps its own.
func (k *inFlightRecordKeeper) release(ctx context.Context, claim *v1.PersistentVolumeClaim, outcome clearOutcome) error {
	_, err := k.p.records.writes.write(ctx, claim, dropRecord(claim.UID))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing finalizer %s: %w", InFlightRecordFinalizer, err)
	}
	k.p.records.done(claim.UID, false)
	k.metrics.clearedOne(outcome)
	msg := "Removed the in-flight record of a deleted claim"
	if outcome == clearMoot {
		msg = "Removed the in-flight record: the claim's PV exists"
	}
	klog.FromContext(ctx).V(2).Info(msg, "outcome", outcome, "deleting", claim.DeletionTimestamp != nil)
	return nil
}
