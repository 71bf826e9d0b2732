package inflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
)

// Outcomes of Keeper.RemoveAll for one claim, beside those of clearing
// (Outcome: pv_exists, deleted, nothing_created, abandoned).
const (
	// RemovalLeftToUpstream: a live claim without a PV; external-provisioner
	// creates its volume by the same deterministic name.
	RemovalLeftToUpstream = "no_pv_left_to_upstream"
	// RemovalCleared: a deleted claim without a PV, cleared as the Keeper
	// does (its Event says whether a volume was deleted).
	RemovalCleared = "cleared_through_driver"
	// RemovalKept: the claim keeps the finalizer (being deleted without a
	// PV, and the driver cannot be asked to delete its volume).
	RemovalKept = "kept"
)

// Removal is what Keeper.RemoveAll did.
type Removal struct {
	// Claims counts the claims of the driver that carried the finalizer.
	Claims int
	// Outcomes counts them by outcome (RemovalKept for those left).
	Outcomes map[string]int
	// Kept names the claims (namespace/name) that keep the finalizer,
	// sorted.
	Kept []string
}

// RemoveAll removes Finalizer from every claim of the keeper's driver in
// its (synced) claim informer, for a rollback to upstream
// external-provisioner, which never removes it; the keeper is not run. Per
// claim: a PV exists, or the claim is not being deleted (its volume, if
// any, is found again by name when it is provisioned): the finalizer goes;
// being deleted without a PV: its volume is cleared as the keeper does
// (Volumes.Clear) when withDriver, else the claim keeps the finalizer and
// is reported in Kept.
func (k *Keeper) RemoveAll(ctx context.Context, withDriver bool) Removal {
	out := Removal{Outcomes: map[string]int{}}
	for _, obj := range k.claims.GetStore().List() {
		claim, ok := obj.(*v1.PersistentVolumeClaim)
		if !ok || !HasFinalizer(claim) || !k.ofDriver(ctx, claim) {
			continue
		}
		out.Claims++
		outcome, err := k.removeResidue(ctx, claim, withDriver)
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
	return out
}

// ofDriver reports whether the claim is to be provisioned by the keeper's
// driver: its storage-provisioner annotation, or else its class, says so.
func (k *Keeper) ofDriver(ctx context.Context, claim *v1.PersistentVolumeClaim) bool {
	for _, ann := range []string{volume.AnnStorageProvisioner, volume.AnnBetaStorageProvisioner} {
		if v, ok := claim.Annotations[ann]; ok {
			return v == k.driver
		}
	}
	return k.volumes.Class(ctx, claim) != nil
}

// errKeptWithoutDriver: a deleted claim without a PV, and no driver to
// delete its volume.
var errKeptWithoutDriver = errors.New("the claim is being deleted without a PV, and the driver is not reachable to delete its volume")

// removeResidue removes one claim's record (see RemoveAll) and returns the
// outcome.
func (k *Keeper) removeResidue(ctx context.Context, claim *v1.PersistentVolumeClaim, withDriver bool) (string, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	name := k.volumes.VolumeName(claim)
	switch {
	case k.hasPV(claim):
		logger.Info("Removing the in-flight record: the claim's PV governs its volume")
		return string(OutcomePVExists), k.release(ctx, claim, OutcomePVExists)
	case claim.DeletionTimestamp == nil:
		logger.Info("Removing the in-flight record of a claim without a PV: external-provisioner will create its volume by the same name, and a volume of that name, if one exists, is returned to it",
			"volume", name)
		return RemovalLeftToUpstream, k.release(ctx, claim, Outcome(RemovalLeftToUpstream))
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
