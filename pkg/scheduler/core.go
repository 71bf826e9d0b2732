package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/limits"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// MaxScore is the highest score Score returns; front ends rescale it.
const MaxScore = 100

const annSelectedNode = "volume.kubernetes.io/selected-node"

// CapacitySource returns the CSIStorageCapacity objects of a class, and the
// resourceVersion of one object by "namespace/name" (false when it is not
// known). An informer with an index by class implements it in O(objects of
// the class).
type CapacitySource interface {
	ForClass(class string) ([]*storagev1.CSIStorageCapacity, error)
	Version(key string) (string, bool)
}

// Listers are the informer-backed reads of the Core.
type Listers struct {
	Claims   corelisters.PersistentVolumeClaimLister
	Volumes  corelisters.PersistentVolumeLister
	Classes  storagelisters.StorageClassLister
	CSINodes storagelisters.CSINodeLister
	// Capacities may be nil: capacity is then not checked.
	Capacities CapacitySource
}

// Config configures a Core.
type Config struct {
	// Driver is the CSI driver (provisioner name) served.
	Driver string
	// ReservationTTL bounds how long a reservation lives without its claim
	// being bound or released; default 5 minutes.
	ReservationTTL time.Duration
}

// Core filters, scores and reserves nodes for pods with volumes of one
// driver. Safe for concurrent use.
type Core struct {
	cfg     Config
	l       Listers
	counter *limits.Counter
	ledger  *Ledger
}

// New returns a Core; counter may be nil (no attach-limit check).
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
	c := &Core{cfg: cfg, l: l, counter: counter, ledger: NewLedger(cfg.ReservationTTL, now)}
	c.ledger.SetSettledCheck(c.capacityCounts)
	return c, nil
}

// IgnoreCapacity turns the capacity filter and score off. Call before use.
func (c *Core) IgnoreCapacity() { c.l.Capacities = nil }

// Ledger returns the reservations in flight.
func (c *Core) Ledger() *Ledger { return c.ledger }

// PendingClaim is an unbound delayed-binding claim of the driver.
type PendingClaim struct {
	Claim *v1.PersistentVolumeClaim
	Class *storagev1.StorageClass
	Bytes int64
}

// PodVolumes are the volumes of the driver a pod uses. Computed once per
// scheduling cycle (PreFilter) and read concurrently by Filter and Score.
type PodVolumes struct {
	Pod     string // namespace/name
	Pending []PendingClaim
	Bound   []*v1.PersistentVolume
	// perClass sums the pending requests by class.
	perClass map[string]int64
}

// owns reports whether a claim UID is one of the pod's pending claims.
func (pv *PodVolumes) owns(uid types.UID) bool {
	for _, p := range pv.Pending {
		if p.Claim.UID == uid {
			return true
		}
	}
	return false
}

// ErrClaimNotFound is returned when a pod uses a claim that does not exist.
var ErrClaimNotFound = errors.New("claim not found")

// PodVolumes collects a pod's volumes of the driver; nil means the pod has
// none and passes untouched.
func (c *Core) PodVolumes(pod *v1.Pod) (*PodVolumes, error) {
	var pv *PodVolumes
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		claim, err := c.l.Claims.PersistentVolumeClaims(pod.Namespace).Get(vol.PersistentVolumeClaim.ClaimName)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", ErrClaimNotFound, pod.Namespace, vol.PersistentVolumeClaim.ClaimName)
		}
		if err != nil {
			return nil, err
		}
		if pv == nil {
			pv = &PodVolumes{Pod: pod.Namespace + "/" + pod.Name, perClass: map[string]int64{}}
		}
		if claim.Spec.VolumeName != "" {
			vol, err := c.l.Volumes.Get(claim.Spec.VolumeName)
			if err == nil && vol.Spec.CSI != nil && vol.Spec.CSI.Driver == c.cfg.Driver {
				pv.Bound = append(pv.Bound, vol)
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
		pv.Pending = append(pv.Pending, PendingClaim{Claim: claim, Class: class, Bytes: size.Value()})
		pv.perClass[class.Name] += size.Value()
	}
	if pv == nil || (len(pv.Pending) == 0 && len(pv.Bound) == 0) {
		return nil, nil
	}
	return pv, nil
}

// segment returns the node's segment key for the driver, or a Status.
func (c *Core) segment(node *v1.Node) (string, *Status) {
	csiNode, err := c.l.CSINodes.Get(node.Name)
	if err != nil {
		csiNode = nil
	}
	keys, err := topology.DriverKeys(csiNode, c.cfg.Driver)
	if err != nil {
		return "", unresolvable(ReasonDriverNotRegistered, "CSI driver %s is not registered on node %s", c.cfg.Driver, node.Name)
	}
	seg := topology.Segment{}
	for _, k := range keys {
		v, ok := node.Labels[k]
		if !ok {
			return "", unresolvable(ReasonTopologyLabelMissing, "node %s has no label %s", node.Name, k)
		}
		seg[k] = v
	}
	return seg.String(), nil
}

// Filter says whether the pod's volumes can be provisioned and attached on
// the node; nil means yes.
func (c *Core) Filter(pv *PodVolumes, node *v1.Node) *Status {
	if pv == nil {
		return nil
	}
	for _, vol := range pv.Bound {
		if vol.Spec.NodeAffinity != nil && vol.Spec.NodeAffinity.Required != nil {
			if ok, _ := corev1helpers.MatchNodeSelectorTerms(node, vol.Spec.NodeAffinity.Required); !ok {
				return unresolvable(ReasonVolumeNodeAffinityConflict, "volume %s is not accessible from node %s", vol.Name, node.Name)
			}
		}
	}
	if len(pv.Pending) == 0 {
		return c.filterLimit(pv, node)
	}
	seg, st := c.segment(node)
	if st != nil {
		return st
	}
	for _, p := range pv.Pending {
		if !topology.MatchLabels(p.Class.AllowedTopologies, node.Labels) {
			return unresolvable(ReasonOutsideAllowedTopologies, "node %s is outside the allowedTopologies of class %s", node.Name, p.Class.Name)
		}
	}
	if st := c.filterLimit(pv, node); st != nil {
		return st
	}
	return c.filterCapacity(pv, node, seg)
}

func (c *Core) filterLimit(pv *PodVolumes, node *v1.Node) *Status {
	if c.counter == nil {
		return nil
	}
	newVolumes := len(pv.Bound)
	for _, p := range pv.Pending {
		// A claim already selected for this node is counted by the node.
		if p.Claim.Annotations[annSelectedNode] != node.Name {
			newVolumes++
		}
	}
	fits, usage, limit, err := c.counter.Fits(node.Name, newVolumes)
	if err != nil {
		return unresolvable(ReasonVolumeLimitExceeded, "counting volumes on node %s: %v", node.Name, err)
	}
	if !fits {
		return &Status{Reason: ReasonVolumeLimitExceeded, Message: fmt.Sprintf(
			"node %s has %d volumes of %s attached and %d pending, limit %d; the pod needs %d more",
			node.Name, usage.Attached, c.cfg.Driver, usage.Pending, *limit, newVolumes)}
	}
	return nil
}

// capacityOf returns the free bytes the node's segment has for a class, and
// whether any capacity object describes it.
func (c *Core) capacityOf(class string, node *v1.Node) (int64, *int64, bool, error) {
	caps, err := c.l.Capacities.ForClass(class)
	if err != nil {
		return 0, nil, false, err
	}
	for _, cap := range caps {
		sel, err := metav1.LabelSelectorAsSelector(cap.NodeTopology)
		if err != nil || cap.NodeTopology == nil || !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		var free int64
		if cap.Capacity != nil {
			free = cap.Capacity.Value()
		}
		var max *int64
		if cap.MaximumVolumeSize != nil {
			m := cap.MaximumVolumeSize.Value()
			max = &m
		}
		return free, max, true, nil
	}
	return 0, nil, false, nil
}

func (c *Core) filterCapacity(pv *PodVolumes, node *v1.Node, seg string) *Status {
	if c.l.Capacities == nil {
		return nil
	}
	for _, class := range sortedKeys(pv.perClass) {
		free, max, known, err := c.capacityOf(class, node)
		if err != nil || !known {
			continue // no capacity information: not checked
		}
		for _, p := range pv.Pending {
			if p.Class.Name == class && max != nil && p.Bytes > *max {
				return unresolvable(ReasonInsufficientCapacity, "claim %s needs %d bytes, above the largest volume (%d) of class %s in segment %s",
					p.Claim.Name, p.Bytes, *max, class, seg)
			}
		}
		need := pv.perClass[class]
		reserved := c.ledger.Reserved(seg, class, pv.owns)
		if need+reserved > free {
			return unresolvable(ReasonInsufficientCapacity, "segment %s has %d bytes free for class %s, %d reserved in flight; the pod needs %d",
				seg, free, class, reserved, need)
		}
	}
	return nil
}

// Score rates a node that passed Filter from 0 to MaxScore: the fraction of
// its segment's capacity left free after this pod's reservation, averaged
// over the pod's classes. Nodes without capacity information score 0.
func (c *Core) Score(pv *PodVolumes, node *v1.Node) int64 {
	if pv == nil || len(pv.Pending) == 0 || c.l.Capacities == nil {
		return 0
	}
	seg, st := c.segment(node)
	if st != nil {
		return 0
	}
	var sum float64
	n := 0
	for _, class := range sortedKeys(pv.perClass) {
		free, _, known, err := c.capacityOf(class, node)
		if err != nil || !known || free <= 0 {
			n++
			continue
		}
		left := free - c.ledger.Reserved(seg, class, pv.owns) - pv.perClass[class]
		if left < 0 {
			left = 0
		}
		sum += float64(left) / float64(free)
		n++
	}
	if n == 0 {
		return 0
	}
	return int64(sum / float64(n) * MaxScore)
}

// Reserve records the pod's pending claims in the node's segment.
func (c *Core) Reserve(pv *PodVolumes, node *v1.Node) {
	if pv == nil || len(pv.Pending) == 0 {
		return
	}
	seg, st := c.segment(node)
	if st != nil {
		return
	}
	for _, p := range pv.Pending {
		c.ledger.Reserve(p.Claim.UID, pv.Pod, seg, p.Class.Name, p.Bytes)
	}
}

// Unreserve drops the pod's reservations.
func (c *Core) Unreserve(pv *PodVolumes) {
	if pv == nil {
		return
	}
	for _, p := range pv.Pending {
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
// reservation; with obs ReserveSelected, an unbound claim of the driver
// with selected-node set reserves its request in that node's segment. node
// is the selected node, nil when unknown.
func (c *Core) ObserveClaim(claim *v1.PersistentVolumeClaim, node *v1.Node) {
	if claim.Spec.VolumeName != "" {
		c.ledger.Settle(claim.UID, claim.Spec.VolumeName)
		return
	}
	if claim.Annotations[annSelectedNode] == "" || node == nil || claim.Spec.StorageClassName == nil {
		c.ledger.Release(claim.UID)
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
	c.ledger.Reserve(claim.UID, claim.Namespace+"/"+claim.Name, seg, class.Name, size.Value())
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
