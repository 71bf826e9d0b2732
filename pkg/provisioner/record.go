package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// newRecords returns the in-flight record (pkg/inflight) of the claims
// this instance owns: open before CreateVolume (openRecord), done when a PV
// is returned (recordOutcome), and clearing what is left through the
// driver (recordVolumes, clearVolume). nil is the record switched off,
// whose methods do nothing.
func newRecords(claims corev1client.PersistentVolumeClaimsGetter, node *nodedeploy.Config) *inflight.Records {
	cfg := inflight.Config{Claims: claims}
	if node != nil {
		cfg.Owns, cfg.Node = func(c *v1.PersistentVolumeClaim) bool { return node.OwnsClaim(c) }, node.NodeName
	}
	return inflight.NewRecords(cfg)
}

// openRecord is Provision's hook before CreateVolume; a claim gone, being
// deleted or bound ends the attempt quietly (its record, if any, is the
// record keeper's business).
func (p *Provisioner) openRecord(ctx context.Context, claim *v1.PersistentVolumeClaim, req *csi.CreateVolumeRequest) (controller.ProvisioningState, error) {
	err := p.records.Open(ctx, claim, req)
	if errors.Is(err, inflight.ErrClaimGoneOrDeleting) {
		klog.FromContext(ctx).V(2).Info("Not creating a volume: the claim is gone, being deleted or bound", "err", err)
		return controller.ProvisioningFinished, &controller.IgnoredError{Reason: err.Error()}
	}
	if err != nil {
		return controller.ProvisioningNoChange, err
	}
	return controller.ProvisioningFinished, nil
}

// recordOutcome is the end of a Provision call for the record: a returned
// PV ends the claim's in-memory state (the finalizer goes when the record
// keeper sees the PV in the informer).
func (p *Provisioner) recordOutcome(uid types.UID, pv *v1.PersistentVolume) {
	if pv != nil {
		p.records.Returned(uid)
	}
}

// recordVolumes is what the in-flight record asks of the core
// (inflight.Volumes).
type recordVolumes struct{ p *Provisioner }

var _ inflight.Volumes = recordVolumes{}

// VolumeName returns the name of the claim's volume and PV (pvName).
func (v recordVolumes) VolumeName(claim *v1.PersistentVolumeClaim) string { return v.p.pvName(claim) }

// Clear deletes the volume of a deleted claim's record (clearVolume).
func (v recordVolumes) Clear(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (inflight.Outcome, string, error) {
	return v.p.clearVolume(ctx, claim, class)
}

// Class returns the claim's StorageClass if it still exists and is of this
// driver (a class of the in-tree plugin the driver replaces: translated to
// CSI, as for provisioning), else nil.
func (v recordVolumes) Class(ctx context.Context, claim *v1.PersistentVolumeClaim) *storagev1.StorageClass {
	name := ""
	if claim.Spec.StorageClassName != nil {
		name = *claim.Spec.StorageClassName
	}
	if v.p.deps.Classes == nil {
		return nil
	}
	class, err := v.p.deps.Classes.Get(name)
	if err != nil {
		return nil
	}
	if v.p.migration.servesClass(class) {
		if class, err = v.p.migration.translateClass(klog.FromContext(ctx), class); err != nil {
			return nil
		}
		return class
	}
	if class.Provisioner != v.p.cfg.DriverName {
		return nil
	}
	return class
}

// clearVolume deletes the volume a deleted claim's record says may exist:
// CreateVolume again with the claim's name and parameters (idempotent: it
// returns the volume if it exists) to learn its ID, then DeleteVolume. The
// request has no accessibility requirements and no content source: by the
// CSI spec an existing volume is returned when it is compatible with the
// capacity, capabilities and parameters, and without requirements any
// volume is accessible; a missing source cannot fail the call. class may be
// nil (deleted): then the request of the last attempt in this process is
// used, and without one the record is abandoned with a warning.
//
// It returns OutcomeDeleted, OutcomeNothingCreated (the driver had no room,
// so no volume of that name exists) or OutcomeAbandoned with the reason; an
// error means a retry may do better (the driver is unavailable, slow or
// busy with the name).
func (p *Provisioner) clearVolume(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (inflight.Outcome, string, error) {
	req, reason := p.rebuildRequest(ctx, claim, class)
	if req == nil {
		return inflight.OutcomeAbandoned, reason, nil
	}
	req.AccessibilityRequirements = nil
	req.VolumeContentSource = nil
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Calling CreateVolume to learn the ID of an in-flight volume", "request", protosanitizer.StripSecrets(req))
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.deps.CSI.CreateVolume(callCtx, req)
	cancel()
	switch status.Code(err) {
	case codes.OK:
	case codes.ResourceExhausted:
		return inflight.OutcomeNothingCreated, "", nil
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Aborted:
		return "", "", fmt.Errorf("CreateVolume %q to learn its ID: %w", req.GetName(), err)
	default:
		return inflight.OutcomeAbandoned, fmt.Sprintf("CreateVolume %q to learn its ID failed: %v", req.GetName(), err), nil
	}
	id := resp.GetVolume().GetVolumeId()
	if err := p.deleteVolume(ctx, id, req.GetSecrets()); err != nil {
		return "", "", err
	}
	p.full.Freed(ctx, resp.GetVolume().GetAccessibleTopology())
	if p.deps.Capacity != nil {
		p.deps.Capacity.Touch(resp.GetVolume().GetAccessibleTopology())
	}
	logger.V(2).Info("Deleted in-flight volume", "volume", req.GetName(), "volumeID", id)
	return inflight.OutcomeDeleted, id, nil
}

// rebuildRequest returns the CreateVolume request of a claim: from its class
// when it still exists, else the last one this process sent. nil and a
// reason when neither is possible.
func (p *Provisioner) rebuildRequest(ctx context.Context, claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) (*csi.CreateVolumeRequest, string) {
	if class != nil {
		opts := controller.ProvisionOptions{StorageClass: class, PVC: claim, PVName: p.pvName(claim)}
		req, err := p.buildCreateRequest(ctx, opts)
		if err == nil {
			if ref := req.secrets[secretProvisioner]; ref != nil {
				if req.csi.Secrets, err = p.readSecret(ctx, ref); err != nil {
					err = fmt.Errorf("reading provisioner secret: %w", err)
				}
			}
		}
		if err == nil {
			return req.csi, ""
		}
		if last := p.records.LastRequest(claim.UID); last != nil {
			return last, ""
		}
		return nil, fmt.Sprintf("the CreateVolume request cannot be rebuilt: %v", err)
	}
	if last := p.records.LastRequest(claim.UID); last != nil {
		return last, ""
	}
	return nil, "its StorageClass is gone, so the CreateVolume request that returns the volume's ID cannot be rebuilt"
}

// deleteInFlight deletes the volume of an earlier attempt of a claim that
// goes back to the scheduler: CreateVolume with the last request (without
// requirements) returns its ID, DeleteVolume removes it. Without a
// remembered request (protection off) the name is tried as an ID, as
// before.
func (p *Provisioner) deleteInFlight(ctx context.Context, uid types.UID, name string) error {
	last := p.records.LastRequest(uid)
	if last == nil {
		return p.deleteVolume(ctx, name, nil)
	}
	last.AccessibilityRequirements = nil
	last.VolumeContentSource = nil
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.deps.CSI.CreateVolume(callCtx, last)
	cancel()
	switch status.Code(err) {
	case codes.OK:
		return p.deleteVolume(ctx, resp.GetVolume().GetVolumeId(), last.GetSecrets())
	case codes.ResourceExhausted:
		return nil
	default:
		return fmt.Errorf("CreateVolume %q to learn its ID: %w", name, err)
	}
}

// newRecordKeeper is the in-flight record's keeper of p (whose record must
// be on), on the claim informer and the PV index, with its Events posted
// through events; the recorder is returned for the library's guard. grace
// is its inflight.KeeperConfig.BinderGrace.
func newRecordKeeper(ctx context.Context, p *Provisioner, claims cache.SharedIndexInformer, pvs inflight.ClaimVolumes,
	events kubernetes.Interface, reg metrics.KubeRegistry, grace time.Duration) (*inflight.Keeper, record.EventRecorder, error) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: events.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: contract.InFlightEventComponent})
	k, err := inflight.NewKeeper(inflight.KeeperConfig{Records: p.records, Volumes: recordVolumes{p}, Claims: claims,
		ClaimVolumes: pvs, Recorder: recorder, Metrics: reg, DriverName: p.cfg.DriverName, BinderGrace: grace})
	if err != nil {
		return nil, nil, err
	}
	return k, recorder, nil
}
