package provisioner

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/fullsegments"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// RemoveInFlightRecords removes inflight.Finalizer from every claim of
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
func RemoveInFlightRecords(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (inflight.Removal, error) {
	logger := klog.FromContext(ctx)
	if !cfg.LeaderElection {
		logger.Info("Leader election is off: assuming that no csi-provisioner or external-provisioner of the driver runs", "driver", cfg.Provisioner.DriverName)
		return removeRecords(ctx, cfg, clients, driver)
	}
	var (
		out  inflight.Removal
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
func removeRecords(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (inflight.Removal, error) {
	k, err := newResidueKeeper(ctx, cfg, clients, driver)
	if err != nil {
		return inflight.Removal{}, err
	}
	return k.RemoveAll(ctx, driver != nil), nil
}

// newResidueKeeper returns a record keeper whose claim, PV and class
// informers have synced; it is never run, its removal and clearing are
// called claim by claim.
func newResidueKeeper(ctx context.Context, cfg ControllerConfig, clients Clients, driver ControllerClient) (*inflight.Keeper, error) {
	pcfg := cfg.Provisioner.withDefaults()
	if err := pcfg.validate(); err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(clients.Work, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	pvs := factory.Core().V1().PersistentVolumes()
	classes := factory.Storage().V1().StorageClasses()
	p := &Provisioner{cfg: pcfg, inBackground: map[types.UID]string{}, deleted: newDeletedVolumes(nil),
		full: fullsegments.New(nil, pcfg.FullSegmentHold, nil), records: newRecords(clients.Work.CoreV1(), pcfg.Node),
		deps: Deps{CSI: driver, Secrets: clients.Work.CoreV1(), ClaimPatcher: clients.Work.CoreV1(), Classes: classes.Lister()}}
	events := clients.Events
	if events == nil {
		events = clients.Work
	}
	volumes, err := NewClaimVolumeIndex(pvs.Informer())
	if err != nil {
		return nil, err
	}
	k, _, err := newRecordKeeper(ctx, p, claims, volumes, events, nil, 0)
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
