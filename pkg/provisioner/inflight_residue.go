package provisioner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// Outcomes of RemoveInFlightRecords for one claim, beside those of the
// record keeper (pv_exists, deleted, nothing_created, abandoned).
const (
	// RemovalLeftToUpstream: a live claim without a PV; external-provisioner
	// creates its volume by the same deterministic name.
	RemovalLeftToUpstream = "no_pv_left_to_upstream"
	// RemovalCleared: a deleted claim without a PV, cleared as the record
	// keeper does (its Event says whether a volume was deleted).
	RemovalCleared = "cleared_through_driver"
	// RemovalKept: the claim keeps the finalizer (being deleted without a
	// PV, and the driver cannot be asked to delete its volume).
	RemovalKept = "kept"
)

// InFlightRecordRemoval is what RemoveInFlightRecords did.
type InFlightRecordRemoval struct {
	// Claims counts the claims of the driver that carried the finalizer.
	Claims int
	// Outcomes counts them by outcome (RemovalKept for those left).
	Outcomes map[string]int
	// Kept names the claims (namespace/name) that keep the finalizer,
	// sorted.
	Kept []string
}

// RemoveInFlightRecords removes InFlightRecordFinalizer from every claim of
// cfg.Provisioner.DriverName, for a rollback to upstream
// external-provisioner, which never removes it. With cfg.LeaderElection it
// first holds the provisioner's leader-election Lease (the name both images
// use), so that no provisioner of the driver works meanwhile, and releases
// it at the end. Per claim: a PV exists, or the claim is not being deleted
// (its volume, if any, is found again by name when it is provisioned): the
// finalizer goes; being deleted without a PV: its volume is deleted as the
// record keeper does (CreateVolume to learn the ID, DeleteVolume) when
// driver is not nil, else the claim keeps the finalizer and is reported in
// Kept. driver may be nil (its socket is unreachable).
func RemoveInFlightRecords(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (InFlightRecordRemoval, error) {
	logger := klog.FromContext(ctx)
	if !cfg.LeaderElection {
		logger.Info("Leader election is off: assuming that no csi-provisioner or external-provisioner of the driver runs", "driver", cfg.Provisioner.DriverName)
		return removeRecords(ctx, cfg, clients, driver)
	}
	var (
		out  InFlightRecordRemoval
		werr error
		ran  bool
	)
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger.Info("Waiting for the leader-election Lease, so that no provisioner of the driver runs meanwhile",
		"lease", contract.LeaderLeaseName(cfg.Provisioner.DriverName), "namespace", leaseNamespace(cfg.LeaderElectionNamespace))
	err := runLeaderElected(leCtx, cfg, clients.LeaderElection, func(ctx context.Context) {
		out, werr = removeRecords(ctx, cfg, clients, driver)
		ran = true
		cancel() // releases the Lease
	})
	switch {
	case err != nil:
		return out, err
	case !ran:
		return out, fmt.Errorf("stopped before holding the leader-election Lease: %w", context.Cause(ctx))
	}
	return out, werr
}

// removeRecords does RemoveInFlightRecords' work, with the record keeper's
// informers and its removal.
func removeRecords(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (InFlightRecordRemoval, error) {
	k, err := newResidueKeeper(ctx, cfg, clients, driver)
	if err != nil {
		return InFlightRecordRemoval{}, err
	}
	out := InFlightRecordRemoval{Outcomes: map[string]int{}}
	for _, obj := range k.claims.GetStore().List() {
		claim, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok || !HasInFlightFinalizer(claim) || !k.ofDriver(ctx, claim) {
			continue
		}
		out.Claims++
		outcome, err := k.removeResidue(ctx, claim, driver != nil)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Keeping the in-flight record", "pvc", klog.KObj(claim))
			outcome = RemovalKept
		}
		out.Outcomes[outcome]++
		if outcome == RemovalKept {
			out.Kept = append(out.Kept, claim.Namespace+"/"+claim.Name)
		}
	}
	sort.Strings(out.Kept)
	return out, nil
}

// newResidueKeeper returns a record keeper whose claim, PV and class
// informers have synced; it is never run, its removal and clearing are
// called claim by claim.
func newResidueKeeper(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (*inFlightRecordKeeper, error) {
	pcfg := cfg.Provisioner.withDefaults()
	if err := pcfg.validate(); err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(clients.Work, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	pvs := factory.Core().V1().PersistentVolumes()
	classes := factory.Storage().V1().StorageClasses()
	p := &Provisioner{cfg: pcfg, inBackground: map[types.UID]string{}, deleted: newDeletedVolumes(nil),
		full: newFullSegments(nil, pcfg.FullSegmentHold, nil), records: newInFlightRecords(clients.Work.CoreV1(), pcfg.Node),
		deps: Deps{CSI: driver, Secrets: clients.Work.CoreV1(), ClaimPatcher: clients.Work.CoreV1(), Classes: classes.Lister()}}
	events := clients.Events
	if events == nil {
		events = clients.Work
	}
	volumes, err := NewClaimVolumeIndex(pvs.Informer())
	if err != nil {
		return nil, err
	}
	k, err := newInFlightRecordKeeper(ctx, p, claims, volumes, classes.Lister(), clients.Work.CoreV1(), events, nil)
	if err != nil {
		return nil, err
	}
	classes.Informer()
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}
	return k, nil
}

// ofDriver reports whether the claim is to be provisioned by the keeper's
// driver: its storage-provisioner annotation, or else its class, says so.
func (k *inFlightRecordKeeper) ofDriver(ctx context.Context, claim *v1.PersistentVolumeClaim) bool {
	for _, ann := range []string{annStorageProvisioner, annBetaStorageProvisioner} {
		if v, ok := claim.Annotations[ann]; ok {
			return v == k.p.cfg.DriverName
		}
	}
	return k.class(ctx, claim) != nil
}

// errKeptWithoutDriver: a deleted claim without a PV, and no driver to
// delete its volume.
var errKeptWithoutDriver = errors.New("the claim is being deleted without a PV, and the driver is not reachable to delete its volume")

// removeResidue removes one claim's record (see RemoveInFlightRecords) and
// returns the outcome.
func (k *inFlightRecordKeeper) removeResidue(ctx context.Context, claim *v1.PersistentVolumeClaim, withDriver bool) (string, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	name := k.p.pvName(claim)
	switch {
	case k.hasPV(claim):
		logger.Info("Removing the in-flight record: the claim's PV governs its volume")
		return string(clearMoot), k.release(ctx, claim, clearMoot)
	case claim.DeletionTimestamp == nil:
		logger.Info("Removing the in-flight record of a claim without a PV: external-provisioner will create its volume by the same name, and a volume of that name, if one exists, is returned to it",
			"volume", name)
		return RemovalLeftToUpstream, k.release(ctx, claim, clearOutcome(RemovalLeftToUpstream))
	case !withDriver:
		return RemovalKept, fmt.Errorf("volume %q: %w", name, errKeptWithoutDriver)
	}
	// The keeper's clearing, retried while the driver asks for it.
	var err error
	for attempt := range 5 {
		if err = k.sync(ctx, cache.MetaObjectToName(claim)); err == nil {
			break
		}
		logger.Error(err, "Clearing the in-flight record", "attempt", attempt+1)
		select {
		case <-ctx.Done():
			return RemovalKept, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * time.Second):
		}
	}
	if err != nil {
		return RemovalKept, err
	}
	logger.Info("Cleared the in-flight record of a deleted claim through the driver", "volume", name)
	return RemovalCleared, nil
}
