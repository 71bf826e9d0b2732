package nodedeploy

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/storage/volume"
)

// Config makes a provisioner the instance of one node: it runs beside a
// node-local driver on that node (upstream external-provisioner's
// --node-deployment) and handles only what concerns the node.
//
//   - It provisions claims whose volume.kubernetes.io/selected-node is
//     NodeName: delayed-binding claims the scheduler placed there, and
//     immediate-binding claims the instance took (ImmediateBinding, see
//     Claimer).
//   - It deletes only the volumes of PVs whose node affinity admits Topology.
//   - Its Node and CSINode informers hold only NodeName; claims and PVs
//     are the node's own with LabelSelection, else cluster-wide (no field
//     selects an annotation); classes are cluster-wide.
//   - It elects no leader: every node's instance runs.
//
// The zero value of each duration is replaced by upstream's default
// (WithDefaults). Its methods accept a nil *Config: no node deployment.
type Config struct {
	// NodeName is the node this instance runs on ($NODE_NAME).
	NodeName string
	// Topology is the node's accessible topology as its driver reports it
	// (NodeGetInfo): a PV whose node affinity it satisfies is this node's.
	Topology map[string]string
	// ImmediateBinding: instances race for immediate-binding claims
	// (upstream's --node-deployment-immediate-binding).
	ImmediateBinding bool
	// BaseDelay and MaxDelay bound the wait before an instance tries to
	// take an immediate-binding claim: random in [0, BaseDelay] at first,
	// doubling after each lost race up to MaxDelay. Defaults 20s and 1m.
	BaseDelay, MaxDelay time.Duration
	// LabelSelection: the instance lists and watches only the claims and
	// PVs labelled with its node (and the driver's pool of unselected
	// immediate-binding claims), selected by the API server
	// (--node-deployment-selection=label, selection.go); csi-node-router
	// must run. Without it every claim and PV of the cluster is watched.
	LabelSelection bool

	// node is the node as a PV's node affinity sees it (name and
	// Topology as labels), for the selector terms OwnsVolume does not
	// match itself; set by WithDefaults.
	node *v1.Node
}

// WithDefaults returns a copy of n with upstream's default delays where
// they are unset (nil for nil). Call it before the other methods.
func (n *Config) WithDefaults() *Config {
	if n == nil {
		return nil
	}
	c := *n
	if c.BaseDelay <= 0 {
		c.BaseDelay = 20 * time.Second
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = time.Minute
	}
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = c.BaseDelay
	}
	c.node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.NodeName, Labels: c.Topology}}
	return &c
}

// OwnsClaim reports whether a claim is this node's to provision: its
// selected node is NodeName. Without node deployment every claim is.
func (n *Config) OwnsClaim(obj any) bool {
	if n == nil {
		return true
	}
	c, ok := obj.(*v1.PersistentVolumeClaim)
	return ok && c.Annotations[volume.AnnSelectedNode] == n.NodeName
}

// OwnsVolume reports whether a PV's volume is on this node: its required
// node affinity admits the node's topology (a PV without one is reachable
// from everywhere, as upstream has it). Without node deployment every PV
// is. It runs for every PV event of the cluster, so the usual expressions
// are matched here without allocating; other terms go to the scheduler's
// own matcher.
func (n *Config) OwnsVolume(obj any) bool {
	if n == nil {
		return true
	}
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return false
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	for i := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		if n.admits(&pv.Spec.NodeAffinity.Required.NodeSelectorTerms[i]) {
			return true
		}
	}
	return false
}

// admits reports whether one node selector term (expressions ANDed) admits
// the node; a term without requirements admits nothing, as in
// kube-scheduler.
func (n *Config) admits(t *v1.NodeSelectorTerm) bool {
	if len(t.MatchFields) > 0 {
		return n.admitsSlowly(t)
	}
	if len(t.MatchExpressions) == 0 {
		return false
	}
	for _, e := range t.MatchExpressions {
		v, has := n.Topology[e.Key]
		switch e.Operator {
		case v1.NodeSelectorOpIn:
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case v1.NodeSelectorOpNotIn:
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case v1.NodeSelectorOpExists:
			if !has {
				return false
			}
		case v1.NodeSelectorOpDoesNotExist:
			if has {
				return false
			}
		default: // Gt, Lt
			return n.admitsSlowly(t)
		}
	}
	return true
}

func (n *Config) admitsSlowly(t *v1.NodeSelectorTerm) bool {
	ok, err := corev1helpers.MatchNodeSelectorTerms(n.node, &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{*t}})
	return err == nil && ok
}

// NodeFieldSelector selects the one object named after the node (its Node
// and its CSINode): the list options of those informers.
func (n *Config) NodeFieldSelector(opts *metav1.ListOptions) {
	opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", n.NodeName).String()
}
