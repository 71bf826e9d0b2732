// Package plugin serves the scheduler core (package scheduler) as a
// kube-scheduler framework plugin: PreFilter, Filter, PreScore/Score,
// Reserve and Unreserve. cmd/csi-topology-scheduler compiles it into
// kube-scheduler.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	sigsjson "sigs.k8s.io/json"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "CSITopology"

const stateKey fwk.StateKey = Name

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// DriverName is the CSI driver whose volumes are checked. Required.
	DriverName string `json:"driverName"`
	// ReservationTTL bounds a reservation whose claim never binds; default 5m.
	ReservationTTL metav1.Duration `json:"reservationTTL,omitempty"`
	// Capacity turns the capacity filter and score on (default) or off
	// (e.g. a driver without GET_CAPACITY, or capacity left to VolumeBinding).
	Capacity *bool `json:"capacity,omitempty"`
	// ScoreWeights weigh the free-capacity and attach-headroom parts of the
	// score; a field left out keeps its default (freeCapacity 1,
	// volumeHeadroom 0). Negative weights, or both 0, are an error.
	ScoreWeights scheduler.ScoreWeights `json:"scoreWeights"`
	// DriverHeartbeat turns the live-driver check on (default) or off: a
	// node whose driver's heartbeat Lease (renewed by csi-node-publisher)
	// has expired is filtered out for pods with pending delayed-binding
	// claims of the driver. Nodes without such a Lease are never.
	DriverHeartbeat *bool `json:"driverHeartbeat,omitempty"`
	// HeartbeatNamespace is the namespace of the heartbeat Leases (the
	// csi-node-publisher's --lease-namespace); empty means all namespaces,
	// which needs list and watch on Leases cluster-wide.
	HeartbeatNamespace string `json:"heartbeatNamespace,omitempty"`
	// CapacityPublishGrace is how long after a class's creation a pod with
	// a claim of it waits for the capacity objects of every segment it may
	// use (CapacityNotPublished), rather than going to the nodes that
	// published first; default 30s, "0s" turns the wait off. Only with
	// capacity on.
	CapacityPublishGrace *metav1.Duration `json:"capacityPublishGrace,omitempty"`
}

// Plugin is the framework plugin. Safe for concurrent use.
type Plugin struct {
	core   *scheduler.Core
	handle fwk.Handle
	// waiting is nil when the heartbeat is not checked.
	waiting *waiting
	// leasesSynced tells whether the heartbeat Leases are known yet; until
	// then every node counts as live. Nil when the heartbeat is not checked.
	leasesSynced func() bool
	// sourceWaiting holds, under node "", the pods rejected because a
	// snapshot they restore was not known yet.
	sourceWaiting *waiting
	// publishWait is nil without a framework handle.
	publishWait *publishWait
	logger      klog.Logger
}

var (
	_ fwk.PreFilterPlugin = &Plugin{}
	_ fwk.FilterPlugin    = &Plugin{}
	_ fwk.PreScorePlugin  = &Plugin{}
	_ fwk.ScorePlugin     = &Plugin{}
	_ fwk.ReservePlugin   = &Plugin{}
	_ fwk.SignPlugin      = &Plugin{}
)

// DecodeArgs reads the plugin's arguments from a scheduler configuration
// (JSON, as kube-scheduler hands them over), strictly as the API server's
// strict field validation does: field names are case-sensitive, and an
// unknown or duplicated field is an error, so a mistyped argument never
// silently falls back to its default.
func DecodeArgs(obj runtime.Object) (Args, error) {
	args := Args{ScoreWeights: scheduler.DefaultScoreWeights()}
	switch o := obj.(type) {
	case nil:
	case *runtime.Unknown:
		strictErrs, err := sigsjson.UnmarshalStrict(o.Raw, &args)
		if err == nil {
			err = errors.Join(strictErrs...)
		}
		if err != nil {
			return args, fmt.Errorf("%s args: %w", Name, err)
		}
	default:
		return args, fmt.Errorf("%s args: unexpected type %T", Name, obj)
	}
	if args.DriverName == "" {
		return args, fmt.Errorf("%s args: driverName is required", Name)
	}
	if err := args.ScoreWeights.Validate(); err != nil {
		return args, fmt.Errorf("%s args: scoreWeights: %w", Name, err)
	}
	return args, nil
}

// New builds the plugin from its arguments and the framework handle: every
// read comes from the scheduler's shared informers.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	snaps, err := snapshotInformer(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	var hb *heartbeats
	if (args.DriverHeartbeat == nil || *args.DriverHeartbeat) && h.ClientSet() != nil {
		if hb, err = newHeartbeats(h.ClientSet(), args.HeartbeatNamespace); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	}
	core, err := newCore(args, h, snaps, hb)
	if err != nil {
		return nil, err
	}
	p := &Plugin{core: core, handle: h, logger: klog.FromContext(ctx), sourceWaiting: newWaiting()}
	if err := p.followSnapshots(ctx, snaps); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if h != nil {
		p.publishWait = &publishWait{timers: map[string]*time.Timer{},
			activate: func(pods map[string]*v1.Pod) { h.Activate(p.logger, pods) }}
	}
	if hb != nil {
		if err := p.followHeartbeats(ctx, hb); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	}
	if err := p.forgetBoundPods(); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	klog.FromContext(ctx).Info("CSITopology plugin ready", "driver", args.DriverName,
		"freeCapacityWeight", args.ScoreWeights.FreeCapacity, "volumeHeadroomWeight", args.ScoreWeights.VolumeHeadroom,
		"driverHeartbeat", p.waiting != nil, "heartbeatNamespace", args.HeartbeatNamespace)
	return p, nil
}

// newCore builds the plugin's core on the framework's informers, with the
// optional reads: snapshots and heartbeats when they are followed (nil
// otherwise), and the CSIDriver informer VolumeBinding reads too.
func newCore(args Args, h fwk.Handle, snaps *scheduler.Snapshots, hb *heartbeats) (*scheduler.Core, error) {
	// A zero TTL takes the Core's default.
	grace := time.Duration(0) // the Core's default
	if args.CapacityPublishGrace != nil {
		if grace = args.CapacityPublishGrace.Duration; grace == 0 {
			grace = -1 // off
		}
	}
	opt := scheduler.OptionalSources{CSIDrivers: h.SharedInformerFactory().Storage().V1().CSIDrivers().Lister()}
	if snaps != nil {
		opt.Snapshots = snaps.Source
	}
	if hb != nil {
		opt.Liveness = hb.live
	}
	return scheduler.NewFromInformers(scheduler.Config{Driver: args.DriverName, ReservationTTL: args.ReservationTTL.Duration,
		ScoreWeights: args.ScoreWeights, CapacityPublishGrace: grace, IgnoreCapacity: args.Capacity != nil && !*args.Capacity},
		h.SharedInformerFactory(), opt)
}

// snapshotInformer returns the core's VolumeSnapshot informer, one of its
// own (the framework's informer factory has only built-in types); nil for
// a framework without a kubeconfig (tests): snapshots off.
func snapshotInformer(cfg *rest.Config) (*scheduler.Snapshots, error) {
	if cfg == nil {
		return nil, nil
	}
	client, err := snapclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	snaps := scheduler.SnapshotInformer(client)
	return &snaps, nil
}

// followSnapshots runs the core's VolumeSnapshot informer (nil: none) as an
// optional API started on ctx whenever the API serves VolumeSnapshots, and
// activates the pods waiting for a snapshot when one appears or changes.
func (p *Plugin) followSnapshots(ctx context.Context, snaps *scheduler.Snapshots) error {
	if snaps == nil {
		return nil
	}
	if _, err := snaps.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.activateSourceWaiting() },
		UpdateFunc: func(_, _ any) { p.activateSourceWaiting() },
	}); err != nil {
		return err
	}
	snaps.API.OnReady(p.activateSourceWaiting)
	go snaps.API.Run(ctx)
	return nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

type state struct{ volumes *scheduler.PodVolumes }

func (s *state) Clone() fwk.StateData { return s }

func read(cs fwk.CycleState) (*scheduler.PodVolumes, bool) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*state)
	if !ok || s == nil || s.volumes == nil {
		return nil, false
	}
	return s.volumes, true
}

// PreFilter collects the pod's volumes of the driver; pods without any are
// skipped by every later extension point of this plugin. A pod with a
// claim of a class so new that some nodes it may use have not published
// its capacity yet waits (CapacityNotPublished).
func (p *Plugin) PreFilter(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	podVols, err := p.core.PodVolumes(pod)
	if errors.Is(err, scheduler.ErrClaimNotFound) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if podVols == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if st := p.waitForCapacity(podVols, pod, nodes); st != nil {
		return nil, st
	}
	cs.Write(stateKey, &state{volumes: podVols})
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: none.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter implements fwk.FilterPlugin.
func (p *Plugin) Filter(_ context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	podVols, ok := read(cs)
	if !ok {
		return nil
	}
	st := p.core.Filter(podVols, ni.Node())
	if st == nil {
		return nil
	}
	p.rejected(st, ni.Node().Name, pod)
	code := fwk.Unschedulable
	if st.Unresolvable {
		code = fwk.UnschedulableAndUnresolvable
	}
	return fwk.NewStatus(code, st.String())
}

// PreScore implements fwk.PreScorePlugin.
func (p *Plugin) PreScore(_ context.Context, cs fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, ok := read(cs); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score implements fwk.ScorePlugin: scheduler.Core.Score (free capacity of
// the node's segment and attach headroom, weighted by the scoreWeights
// argument) rescaled to 0..MaxNodeScore.
func (p *Plugin) Score(_ context.Context, cs fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	podVols, ok := read(cs)
	if !ok {
		return 0, nil
	}
	return p.core.Score(podVols, ni.Node()) * fwk.MaxNodeScore / scheduler.MaxScore, nil
}

// ScoreExtensions implements fwk.ScorePlugin: none.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve records the pod's pending claims in the ledger for the node's
// segment, so pods scheduled right after see them.
func (p *Plugin) Reserve(_ context.Context, cs fwk.CycleState, _ *v1.Pod, nodeName string) *fwk.Status {
	podVols, ok := read(cs)
	if !ok {
		return nil
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	p.core.Reserve(podVols, ni.Node())
	return nil
}

// Unreserve drops the pod's reservations; idempotent.
func (p *Plugin) Unreserve(_ context.Context, cs fwk.CycleState, _ *v1.Pod, _ string) {
	if podVols, ok := read(cs); ok {
		p.core.Unreserve(podVols)
	}
}

// signatureKey names the plugin's fragment of a pod's signature: the pod's
// claims of the driver as the core reads them (scheduler.PodVolumes.Signature).
func (p *Plugin) signatureKey() string {
	return "v1.Pod.Spec.Volumes.PersistentVolumeClaims()." + Name + "(" + p.core.Driver() + ")"
}

// SignPod implements fwk.SignPlugin, so that the profile keeps
// kube-scheduler's pod-signature batching (KEP-5598) on: pods with the same
// signature may reuse the previous pod's node ranking. The signature holds
// what PreFilter, Filter and Score read of the pod: its volume sources
// (the key VolumeBinding also uses) and its claims of the driver with their
// class, request, data source and bound volume
// (scheduler.PodVolumes.Signature). A pod whose claim does not exist yet is
// not signed (PreFilter rejects it anyway).
func (p *Plugin) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	podVols, err := p.core.PodVolumes(pod)
	if errors.Is(err, scheduler.ErrClaimNotFound) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with a missing claim are not signable")
	}
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	frags := []fwk.SignFragment{{Key: fwk.VolumesSignerName, Value: fwk.VolumesSigner(pod)}}
	if podVols != nil {
		frags = append(frags, fwk.SignFragment{Key: p.signatureKey(), Value: podVols.Signature()})
	}
	return frags, nil
}
