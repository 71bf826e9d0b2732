package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// MaxScore is the highest score Score returns; front ends rescale it.
const MaxScore = 100

const annSelectedNode = storagehelpers.AnnSelectedNode

// CapacitySource is the read side of the published CSIStorageCapacity
// objects that the Core depends upon. Implementations are safe for
// concurrent use and own the objects they read (callers get copies of
// what they need). NewCapacitySource implements it on an informer.
type CapacitySource interface {
	// Capacity returns what the CSIStorageCapacity objects of class report
	// for a node with these labels, false when none covers it. When several
	// do, it chooses the one with the largest capacity (as VolumeBinding
	// does, any object that fits will do), ties broken by the smallest
	// namespace/name, so the answer never depends on listing order. Cost:
	// independent of the number of segments (see NewCapacitySource).
	Capacity(class string, nodeLabels map[string]string) (Capacity, bool)
	// Version returns the resourceVersion of one object by
	// "namespace/name", false when it is not known.
	Version(key string) (string, bool)
}

// Capacity is what one CSIStorageCapacity object reports.
type Capacity struct {
	// Object is the object's "namespace/name".
	Object string
	// Free is its capacity in bytes (0 when unset).
	Free int64
	// MaxVolume is its maximumVolumeSize in bytes, nil when unset.
	MaxVolume *int64
}

// Listers are the informer-backed reads of the Core.
type Listers struct {
	Claims   corelisters.PersistentVolumeClaimLister
	Volumes  corelisters.PersistentVolumeLister
	Classes  storagelisters.StorageClassLister
	CSINodes storagelisters.CSINodeLister
	// Capacities may be nil: capacity is then not checked.
	Capacities CapacitySource
	// Snapshots may be nil: a restore from a VolumeSnapshot is then not
	// kept in reach of the snapshot's volume (clones still are).
	Snapshots SnapshotSource
	// Liveness may be nil: the driver's heartbeat is then not checked.
	Liveness LivenessSource
	// CSIDrivers may be nil: the driver's CSIDriver is then not read. When
	// its storageCapacity is true, VolumeBinding refuses every node of a
	// segment without a capacity object, so a pod of a new class waits
	// (CapacityNotPublished) also while no segment has published yet.
	CSIDrivers storagelisters.CSIDriverLister
}

// Config configures a Core.
type Config struct {
	// Driver is the CSI driver (provisioner name) served.
	Driver string
	// ReservationTTL bounds how long a reservation lives without its claim
	// being bound or released; default 5 minutes.
	ReservationTTL time.Duration
	// ScoreWeights weigh the parts of Score; the zero value means
	// DefaultScoreWeights.
	ScoreWeights ScoreWeights
	// CapacityPublishGrace is how long after a class's creation a segment
	// without a capacity object of it counts as not published yet, so that
	// a pod waits for it (CapacityNotPublished); 0 means
	// DefaultCapacityPublishGrace, a negative value turns the wait off.
	CapacityPublishGrace time.Duration
	// IgnoreCapacity turns the capacity filter and score off, as a nil
	// Listers.Capacities does (the plugin's capacity: false).
	IgnoreCapacity bool
	// CSINodeEvents says that the Core's owner calls CSINodeChanged on every
	// CSINode event (NewFromInformers's handlers do), so a cached segment is
	// trusted without reading the CSINode lister.
	CSINodeEvents bool
}

// Core filters, scores and reserves nodes for pods with volumes of one
// driver. Safe for concurrent use.
type Core struct {
	cfg     Config
	l       Listers
	counter *limits.Counter
	ledger  *Ledger
	now     func() time.Time
	// segments caches each node's segment (segments.go).
	segments nodeSegments
}

// New returns a Core, complete: cfg and l hold all it reads, and nothing
// is set later. counter may be nil (no attach-limit check).
func New(cfg Config, l Listers, counter *limits.Counter, now func() time.Time) (*Core, error) {
	if cfg.Driver == "" {
		return nil, errors.New("scheduler: a driver name is required")
	}
	if l.Claims == nil || l.Volumes == nil || l.Classes == nil || l.CSINodes == nil {
		return nil, errors.New("scheduler: claim, volume, class and CSINode listers are required")
	}
	if cfg.ReservationTTL <= 0 {
		cfg.ReservationTTL = 5 * time.Minute
	}
	if cfg.CapacityPublishGrace == 0 {
		cfg.CapacityPublishGrace = DefaultCapacityPublishGrace
	}
	if cfg.ScoreWeights == (ScoreWeights{}) {
		cfg.ScoreWeights = DefaultScoreWeights()
	}
	if err := cfg.ScoreWeights.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	if cfg.IgnoreCapacity {
		l.Capacities = nil
	}
	c := &Core{cfg: cfg, l: l, counter: counter, ledger: NewLedger(cfg.ReservationTTL, now), now: now}
	c.segments.tracked = cfg.CSINodeEvents
	c.ledger.SetSettledCheck(c.capacityCounts)
	return c, nil
}

// Driver returns the CSI driver the Core serves.
func (c *Core) Driver() string { return c.cfg.Driver }

// Ledger returns the reservations in flight.
func (c *Core) Ledger() *Ledger { return c.ledger }

// PendingClaim is an unbound delayed-binding claim of the driver.
type PendingClaim struct {
	// Claim is the informer's copy: read only.
	Claim *v1.PersistentVolumeClaim
	// Class is the claim's storage class, of the driver.
	Class *storagev1.StorageClass
	// Bytes is the claim's storage request.
	Bytes int64
	// Source is where the claim's data source can be read from, nil when
	// it does not restrict the node.
	Source *Source
}

// PodVolumes are the volumes of the driver a pod uses. Computed once per
// scheduling cycle (PreFilter) and read concurrently by Filter and Score;
// valid for that cycle only: the capacity and reservations of a segment
// are read once, by the first Filter or Score of one of its nodes.
type PodVolumes struct {
	// Pod is the pod's "namespace/name".
	Pod string
	// Pending are the unbound delayed-binding claims of the driver, each
	// once.
	Pending []PendingClaim
	// Bound are the PVs of the driver the pod's bound claims use.
	Bound []*v1.PersistentVolume
	// perClass sums the pending requests by class; classes are its keys,
	// sorted.
	perClass map[string]int64
	classes  []string
	// own are the UIDs of the pending claims.
	own []types.UID
	// views are the pod's capacity views by segment, shared by Filter and
	// Score when scope allows (segments.go).
	views sync.Map
	scope segmentScope
}

// ErrClaimNotFound is returned when a pod uses a claim that does not exist.
var ErrClaimNotFound = errors.New("claim not found")

// PodVolumes collects a pod's volumes of the driver; nil means the pod has
// none and passes untouched.
func (c *Core) PodVolumes(pod *v1.Pod) (*PodVolumes, error) {
	var podVols *PodVolumes
	for i, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil || usedBefore(pod.Spec.Volumes[:i], vol.PersistentVolumeClaim.ClaimName) {
			continue
		}
		claim, err := c.l.Claims.PersistentVolumeClaims(pod.Namespace).Get(vol.PersistentVolumeClaim.ClaimName)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", ErrClaimNotFound, pod.Namespace, vol.PersistentVolumeClaim.ClaimName)
		}
		if err != nil {
			return nil, err
		}
		if podVols == nil {
			podVols = &PodVolumes{Pod: pod.Namespace + "/" + pod.Name, perClass: map[string]int64{}}
		}
		if claim.Spec.VolumeName != "" {
			vol, err := c.l.Volumes.Get(claim.Spec.VolumeName)
			if err == nil && vol.Spec.CSI != nil && vol.Spec.CSI.Driver == c.cfg.Driver {
				podVols.Bound = append(podVols.Bound, vol)
			}
			continue
		}
		if claim.Spec.StorageClassName == nil {
			continue
		}
		class, err := c.l.Classes.Get(*claim.Spec.StorageClassName)
		if err != nil || class.Provisioner != c.cfg.Driver ||
			class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			continue
		}
		size := claim.Spec.Resources.Requests[v1.ResourceStorage]
		podVols.Pending = append(podVols.Pending, PendingClaim{Claim: claim, Class: class, Bytes: size.Value(), Source: c.source(claim, class)})
		podVols.perClass[class.Name] += size.Value()
		podVols.own = append(podVols.own, claim.UID)
	}
	if podVols == nil || (len(podVols.Pending) == 0 && len(podVols.Bound) == 0) {
		return nil, nil
	}
	for class := range podVols.perClass {
		podVols.classes = append(podVols.classes, class)
	}
	sort.Strings(podVols.classes)
	return podVols, nil
}

// usedBefore reports whether one of vols already names the claim: a pod
// that mounts a claim twice uses it once.
func usedBefore(vols []v1.Volume, claim string) bool {
	for _, v := range vols {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// segment returns the node's segment key for the driver, or a Status.
func (c *Core) segment(node *v1.Node) (string, *Status) {
	ns := c.nodeSegment(node)
	return ns.seg, ns.st
}

// Filter says whether the pod's volumes can be provisioned and attached on
// the node; nil means yes.
func (c *Core) Filter(podVols *PodVolumes, node *v1.Node) *Status {
	if podVols == nil {
		return nil
	}
	for _, vol := range podVols.Bound {
		if vol.Spec.NodeAffinity != nil && vol.Spec.NodeAffinity.Required != nil {
			if ok, _ := corev1helpers.MatchNodeSelectorTerms(node, vol.Spec.NodeAffinity.Required); !ok {
				return unresolvable(ReasonVolumeNodeAffinityConflict, "volume %s is not accessible from node %s", vol.Name, node.Name)
			}
		}
	}
	ns := c.nodeSegment(node)
	if ns.st != nil {
		// Without a segment the node can mount no volume of the driver.
		return ns.st
	}
	if len(podVols.Pending) == 0 {
		// Bound volumes only: the node must still be able to mount them.
		return c.filterLimit(podVols, node, ns)
	}
	if st := c.filterLiveness(node.Name); st != nil {
		return st
	}
	for _, p := range podVols.Pending {
		if !topology.MatchLabels(p.Class.AllowedTopologies, node.Labels) {
			return unresolvable(ReasonOutsideAllowedTopologies, "node %s is outside the allowedTopologies of class %s", node.Name, p.Class.Name)
		}
		if p.Source != nil && p.Source.Unknown {
			return &Status{Reason: ReasonDataSourceUnknown, Message: p.Source.Message, Unresolvable: true}
		}
		if p.Source != nil && !p.Source.Reach.Node(node.Name, node.Labels) {
			return &Status{Reason: ReasonDataSourceUnreachable, Message: p.Source.Message, Unresolvable: true}
		}
	}
	if st := c.filterLimit(podVols, node, ns); st != nil {
		return st
	}
	return c.filterCapacity(podVols, node, ns)
}

// filterCapacity checks the pod's pending claims against the capacity of
// the node's segment, minus the reservations in flight there.
func (c *Core) filterCapacity(podVols *PodVolumes, node *v1.Node, ns *nodeSegment) *Status {
	if c.l.Capacities == nil {
		return nil
	}
	return c.capacityView(podVols, node, ns).st
}

// Reserve records the pod's pending claims in the node's segment.
func (c *Core) Reserve(podVols *PodVolumes, node *v1.Node) {
	if podVols == nil || len(podVols.Pending) == 0 {
		return
	}
	seg, st := c.segment(node)
	if st != nil {
		return
	}
	for _, p := range podVols.Pending {
		c.ledger.Reserve(Request{UID: p.Claim.UID, Claim: p.Claim.Namespace + "/" + p.Claim.Name, Pod: podVols.Pod,
			Node: node.Name, Segment: seg, Class: p.Class.Name, Bytes: p.Bytes})
	}
}

// Unreserve drops the pod's reservations.
func (c *Core) Unreserve(podVols *PodVolumes) {
	if podVols == nil {
		return
	}
	for _, p := range podVols.Pending {
		c.ledger.Release(p.Claim.UID)
	}
}

// capacityCounts reports whether the published capacity already counts a
// volume: the capacity informer has seen every object version recorded on
// the PV by csi-provisioner (topology.AnnCapacityVersions). A PV not yet
// seen does not count; a PV without the annotation (capacity publishing
// off, or the refresh failed) counts at once, as does an object that is
// gone.
func (c *Core) capacityCounts(volume string) bool {
	pv, err := c.l.Volumes.Get(volume)
	if err != nil {
		return false
	}
	ann := pv.Annotations[topology.AnnCapacityVersions]
	if ann == "" || c.l.Capacities == nil {
		return true
	}
	for key, want := range topology.ParseCapacityVersions(ann) {
		if have, ok := c.l.Capacities.Version(key); ok && !topology.VersionReached(have, want) {
			return false
		}
	}
	return true
}

// ObserveClaim keeps the ledger in step with a claim (fed from claim
// events): a bound claim's reservation lasts until the published capacity
// counts its volume (Ledger.Settle); one without selected-node holds no
// reservation; an unbound claim of the driver with selected-node set
// reserves its request in that node's segment. node is the selected node,
// nil when unknown: then a reservation on another node ends, and one on
// the selected node stays (a Node or CSINode event may have made it while
// this claim event was handled).
func (c *Core) ObserveClaim(claim *v1.PersistentVolumeClaim, node *v1.Node) {
	if claim.Spec.VolumeName != "" {
		c.ledger.Settle(claim.UID, claim.Spec.VolumeName)
		return
	}
	selected := claim.Annotations[annSelectedNode]
	if selected == "" || claim.Spec.StorageClassName == nil {
		c.ledger.Release(claim.UID)
		return
	}
	if node == nil {
		c.ledger.ReleaseUnlessOn(claim.UID, selected)
		return
	}
	class, err := c.l.Classes.Get(*claim.Spec.StorageClassName)
	if err != nil || class.Provisioner != c.cfg.Driver {
		return
	}
	seg, st := c.segment(node)
	if st != nil {
		return
	}
	size := claim.Spec.Resources.Requests[v1.ResourceStorage]
	key := claim.Namespace + "/" + claim.Name
	c.ledger.Reserve(Request{UID: claim.UID, Claim: key, Pod: key, Node: node.Name, Segment: seg, Class: class.Name, Bytes: size.Value()})
}

// OwnsClass reports whether the storage class is the driver's, and whether
// it is known at all.
func (c *Core) OwnsClass(name string) (owned, known bool) {
	class, err := c.l.Classes.Get(name)
	if err != nil {
		return false, false
	}
	return class.Provisioner == c.cfg.Driver, true
}

// OwnsVolume reports whether the PV exists and is a CSI volume of the
// driver.
func (c *Core) OwnsVolume(name string) bool {
	pv, err := c.l.Volumes.Get(name)
	return err == nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == c.cfg.Driver
}
