package scheduler

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// Data source kinds the filter follows: a clone of a claim and a restore of
// a VolumeSnapshot (group snapshot.storage.k8s.io).
const (
	kindClaim     = "PersistentVolumeClaim"
	kindSnapshot  = "VolumeSnapshot"
	snapshotGroup = "snapshot.storage.k8s.io"
)

// SnapshotSource is the read side of the VolumeSnapshot objects that the
// Core depends upon. Implementations are safe for concurrent use;
// NewSnapshotSource implements it on an informer.
type SnapshotSource interface {
	// SnapshotClaim returns the claim a VolumeSnapshot was taken of
	// (spec.source.persistentVolumeClaimName, in the snapshot's namespace),
	// "" when it was made from a pre-provisioned VolumeSnapshotContent, and
	// an error (ErrSnapshotsNotServed, ErrSnapshotNotFound) when the
	// snapshot is not known yet. Cost: one lookup by key.
	SnapshotClaim(namespace, name string) (string, error)
}

// Source is where the data of a pending claim comes from, when that source
// restricts where the claim's volume can be made: a clone can only be made
// where the volume it copies is reachable, and a restore where the volume
// the snapshot was taken of is (the driver has the last word; the filter
// keeps pods off nodes that obviously cannot work).
type Source struct {
	// Reach is the source volume's node affinity; constrained unless
	// Unknown.
	Reach topology.Reach
	// Unknown: the source is not known yet (a snapshot not seen yet, or
	// the VolumeSnapshot API not served yet), so no node can be judged;
	// the pod waits (ReasonDataSourceUnknown on every node) rather than be
	// placed out of the source's reach, which csi-provisioner would send
	// back.
	Unknown bool
	// apiMissing: Unknown because the VolumeSnapshot API is not served
	// (yet); see PodVolumes.AwaitsSnapshotAPI.
	apiMissing bool
	// Message is Filter's message for a node Reach excludes, e.g.
	// "claim ns/c clones ns/src, whose volume is reachable only from
	// topology.kubernetes.io/zone in (z1)". Built once per pod.
	Message string
}

// source resolves a pending claim's data source (dataSourceRef, else
// dataSource) to where its copy may be made: topology.CopyReach, the rule
// csi-provisioner follows, on the source volume's node affinity and the
// class's topology.AnnCopyPlacement. nil means no constraint: no data
// source, another kind (a populator), another namespace (not supported by
// csi-provisioner, which says so on the claim), a source claim or PV not
// (yet) known or unbound, a snapshot of no claim, snapshots not readable
// (RBAC), a copy the rule does not narrow (a restore of a volume that is not
// node-bound, or a class placing copies anywhere), or an invalid annotation
// (csi-provisioner refuses the claim). A snapshot not known yet gives an
// Unknown Source. Cost: at most four lister lookups, and one CSINode lookup
// per term of the source volume's affinity.
func (c *Core) source(claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) *Source {
	group, kind, ns, name := dataSource(claim)
	if name == "" || ns != claim.Namespace {
		return nil
	}
	placement, err := topology.ClassCopyPlacement(class)
	if err != nil || placement == topology.CopyAnywhere {
		return nil
	}
	var what, of string
	restore := false
	switch {
	case group == "" && kind == kindClaim:
		what, of = fmt.Sprintf("clones %s/%s", ns, name), name
	case group == snapshotGroup && kind == kindSnapshot && c.l.Snapshots != nil:
		src, err := c.l.Snapshots.SnapshotClaim(ns, name)
		if err != nil {
			return &Source{Unknown: true, apiMissing: errors.Is(err, ErrSnapshotsNotServed), Message: fmt.Sprintf("claim %s/%s restores snapshot %s/%s, and %v; the pod waits until it is known, so that the volume is made in reach of the snapshot's source",
				claim.Namespace, claim.Name, ns, name, err)}
		}
		if src == "" {
			return nil
		}
		what, of, restore = fmt.Sprintf("restores snapshot %s/%s of %s/%s", ns, name, ns, src), src, true
	default:
		return nil
	}
	srcClaim, err := c.l.Claims.PersistentVolumeClaims(ns).Get(of)
	if err != nil || srcClaim.Spec.VolumeName == "" {
		return nil
	}
	pv, err := c.l.Volumes.Get(srcClaim.Spec.VolumeName)
	if err != nil {
		return nil
	}
	reach, basis := topology.CopyReach(topology.Copy{Restore: restore, Affinity: pv.Spec.NodeAffinity, Placement: placement},
		topology.CSINodeKeys(c.csiNode, c.cfg.Driver))
	if !reach.Constrained() {
		return nil
	}
	return &Source{Reach: reach, Message: fmt.Sprintf("claim %s/%s %s, whose volume is reachable only from %s (%s)",
		claim.Namespace, claim.Name, what, describeTerms(pv.Spec.NodeAffinity.Required.NodeSelectorTerms), basis.Explain())}
}

// AwaitsSnapshotAPI reports whether a pending claim restores a snapshot
// while the VolumeSnapshot API is not served yet: asked again a moment
// later, once the API has been probed (asking pokes it), the answer may
// differ. A front end that cannot retry the pod later by itself (the
// extender) may wait a little for it.
func (podVols *PodVolumes) AwaitsSnapshotAPI() bool {
	if podVols == nil {
		return false
	}
	for _, p := range podVols.Pending {
		if p.Source != nil && p.Source.apiMissing {
			return true
		}
	}
	return false
}

// dataSource returns a claim's data source: dataSourceRef when set (it may
// name another namespace), else dataSource (always the claim's namespace).
func dataSource(claim *v1.PersistentVolumeClaim) (group, kind, ns, name string) {
	ns = claim.Namespace
	if ref := claim.Spec.DataSourceRef; ref != nil {
		if ref.APIGroup != nil {
			group = *ref.APIGroup
		}
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = *ref.Namespace
		}
		return group, ref.Kind, ns, ref.Name
	}
	if ref := claim.Spec.DataSource; ref != nil {
		if ref.APIGroup != nil {
			group = *ref.APIGroup
		}
		return group, ref.Kind, ns, ref.Name
	}
	return "", "", ns, ""
}

// describeTerms renders required node selector terms in label selector
// syntax, terms joined by " or ": e.g. "topology.kubernetes.io/zone in (z1)"
// or "zone in (z1),rack notin (r2) or metadata.name in (n7)".
func describeTerms(terms []v1.NodeSelectorTerm) string {
	parts := make([]string, 0, len(terms))
	for _, term := range terms {
		var reqs []string
		for _, r := range term.MatchExpressions {
			reqs = append(reqs, describeRequirement(r))
		}
		for _, r := range term.MatchFields {
			reqs = append(reqs, describeRequirement(r))
		}
		if len(reqs) == 0 {
			reqs = append(reqs, "nowhere")
		}
		parts = append(parts, strings.Join(reqs, ","))
	}
	return strings.Join(parts, " or ")
}

var operators = map[v1.NodeSelectorOperator]selection.Operator{
	v1.NodeSelectorOpIn: selection.In, v1.NodeSelectorOpNotIn: selection.NotIn,
	v1.NodeSelectorOpExists: selection.Exists, v1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	v1.NodeSelectorOpGt: selection.GreaterThan, v1.NodeSelectorOpLt: selection.LessThan,
}

// describeRequirement renders one requirement as a label selector does
// ("key in (a,b)", "!key", "key>3"), or plainly when it is not a valid
// label requirement.
func describeRequirement(r v1.NodeSelectorRequirement) string {
	if op, ok := operators[r.Operator]; ok {
		if req, err := labels.NewRequirement(r.Key, op, r.Values); err == nil {
			return req.String()
		}
	}
	return fmt.Sprintf("%s %s %v", r.Key, r.Operator, r.Values)
}
