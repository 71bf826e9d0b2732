package topology

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// AnnCopyPlacement is the StorageClass annotation by which an operator says
// where copies of a data source (clones and snapshot restores into a claim
// of the class) may be made; see CopyPlacement. It is an annotation, not a
// parameter, so that it never reaches the driver (upstream
// external-provisioner ignores class annotations too, so a class carrying it
// keeps working after a swap back) and can be changed on a class in use.
const AnnCopyPlacement = "csi-topology-provisioner.io/copy-placement"

// CopyPlacement is the value of AnnCopyPlacement.
type CopyPlacement string

const (
	// CopyAuto (also the annotation's absence): clones are made where
	// their source volume is reachable, restores anywhere unless the
	// snapshot's source volume is node-bound (NodeBound). See CopyReach.
	CopyAuto CopyPlacement = "auto"
	// CopyNearSource: clones and restores are made only where the source
	// volume (the clone's, or the one the snapshot was taken of) is
	// reachable: storage whose copies stay where the data are.
	CopyNearSource CopyPlacement = "source"
	// CopyAnywhere: clones and restores are not narrowed at all, as
	// upstream external-provisioner does: regional snapshots and clones
	// (the driver decides, and refuses what it cannot do).
	CopyAnywhere CopyPlacement = "anywhere"
)

// ErrInvalidCopyPlacement marks a class whose AnnCopyPlacement is none of
// the values above.
var ErrInvalidCopyPlacement = errors.New("invalid copy placement")

// ClassCopyPlacement reads a class's AnnCopyPlacement: CopyAuto when it is
// absent or empty, an error wrapping ErrInvalidCopyPlacement (and
// CopyAuto) when it is not a known value. A nil class is CopyAuto.
func ClassCopyPlacement(class *storagev1.StorageClass) (CopyPlacement, error) {
	if class == nil {
		return CopyAuto, nil
	}
	switch v := CopyPlacement(class.Annotations[AnnCopyPlacement]); v {
	case "", CopyAuto:
		return CopyAuto, nil
	case CopyNearSource, CopyAnywhere:
		return v, nil
	default:
		return CopyAuto, fmt.Errorf("%w: StorageClass %q has annotation %s=%q; use %q, %q or %q",
			ErrInvalidCopyPlacement, class.Name, AnnCopyPlacement, string(v), CopyAuto, CopyNearSource, CopyAnywhere)
	}
}

// Copy is a claim's data source as the copy rule sees it.
type Copy struct {
	// Restore: the claim restores a VolumeSnapshot; false: it clones a
	// claim.
	Restore bool
	// Affinity is the node affinity of the source volume's PV: the
	// clone's source, or the volume the snapshot was taken of when it
	// still exists; nil when unknown.
	Affinity *v1.VolumeNodeAffinity
	// Placement is the claim's class's AnnCopyPlacement.
	Placement CopyPlacement
}

// CopyBasis says why CopyReach narrowed a copy, or did not.
type CopyBasis string

const (
	// BasisClone: a clone, made where its source volume is reachable.
	BasisClone CopyBasis = "clone"
	// BasisNodeBound: a restore of a snapshot of a node-bound volume.
	BasisNodeBound CopyBasis = "node-bound"
	// BasisClass: the class's AnnCopyPlacement said "source".
	BasisClass CopyBasis = "class"
	// BasisAnywhere: not narrowed (a restore of a volume that is not
	// node-bound, or the class said "anywhere").
	BasisAnywhere CopyBasis = "anywhere"
)

// Explain says in words why a copy was narrowed (or not), for Events,
// filter messages and explain, e.g. "a restore of a snapshot of a node-bound
// volume".
func (b CopyBasis) Explain() string {
	switch b {
	case BasisClone:
		return "a clone is made where its source volume is reachable"
	case BasisNodeBound:
		return "the snapshot was taken of a node-bound volume, so it is restored on that node"
	case BasisClass:
		return "the StorageClass's annotation " + AnnCopyPlacement + "=" + string(CopyNearSource) + " keeps copies near their source"
	}
	return "the copy may be made anywhere"
}

// NodeKeys returns the topology keys a CSI driver reports on the named
// node (its CSINode entry for the driver), and false when the node has no
// CSINode entry for the driver. Callers build it from their CSINode lister
// (CSINodeKeys), so that a lookup costs one read by name.
type NodeKeys func(node string) ([]string, bool)

// CSINodeKeys builds NodeKeys from a lookup of CSINode objects by name
// (nil when there is none) for a driver.
func CSINodeKeys(get func(name string) *storagev1.CSINode, driver string) NodeKeys {
	return func(node string) ([]string, bool) {
		csiNode := get(node)
		if csiNode == nil {
			return nil, false
		}
		keys, err := DriverKeys(csiNode, driver)
		if err != nil {
			return nil, false
		}
		return keys, true
	}
}

// CopyReach is the one rule by which the provisioner (requisite segments,
// SourceUnreachable), the scheduler filter (which nodes a pod with a
// pending copy may go to) and explain decide where a clone or a restore may
// be made: the Reach it is narrowed to (the zero Reach does not narrow) and
// why.
//
//   - The class says "anywhere": not narrowed. "source": narrowed to the
//     source volume's reach, for clones and restores alike.
//   - Otherwise (auto) a clone is narrowed to its source volume's reach: a
//     CSI volume source is read by the driver where the volume is.
//   - An auto restore is narrowed only when its snapshot's source volume is
//     node-bound (NodeBound): node-local storage (LVM, local disks), whose
//     snapshots live beside the volume on its node. Any other restore is
//     not narrowed, as upstream external-provisioner v6.3.0 does: the
//     snapshots of zonal block storage (EBS, PD, Azure Disk) are regional
//     and restore into any zone.
//
// The snapshot's own topology (CSI Snapshot.accessible_topology with the
// SNAPSHOT_ACCESSIBILITY_CONSTRAINTS plugin capability, alpha in CSI spec
// v1.13.0; KEP-5943) would be the better evidence, but no VolumeSnapshotContent
// field carries it in the external-snapshotter client modules served (v8.4.0
// pinned, v8.7.0 the newest): when one does, it goes first here.
//
// Example: the source PV's affinity is zone in (z1). A clone: zone in (z1).
// A restore: anywhere. With the affinity hostname in (n1) (node-bound): a
// restore is narrowed to n1 too. With the class annotation "anywhere" the
// clone is not narrowed either.
func CopyReach(c Copy, keys NodeKeys) (Reach, CopyBasis) {
	src := Reach{Affinity: c.Affinity}
	switch {
	case c.Placement == CopyAnywhere:
		return Reach{}, BasisAnywhere
	case c.Placement == CopyNearSource:
		return src, BasisClass
	case !c.Restore:
		return src, BasisClone
	case NodeBound(c.Affinity, keys):
		return src, BasisNodeBound
	}
	return Reach{}, BasisAnywhere
}

// NodeBound says whether a volume's node affinity binds it to named nodes,
// the sign of node-local storage: every required term names one node, by
// matchFields metadata.name in (n), by kubernetes.io/hostname in (n), or by
// a topology key K in (n) where n is a node on which the driver reports K
// (keys; the node-local drivers' convention, e.g. topology.topolvm.io/node).
//
// Why: a volume reachable from one node (or, replicated, from a few named
// ones) is local storage, whose snapshots are local too; a volume reachable
// from a zone or region is network storage, whose snapshots are kept by the
// storage system apart from the volume, regionally for the clouds' disks.
// It gets wrong: a zonal driver that also reports a node key in its
// volumes' topology (restores narrowed to that node: set the class's
// annotation to "anywhere"); node-local storage whose node key holds
// something else than the node's name (an ID), storage bound to a rack or a
// group of nodes, or a source whose node is gone (not narrowed: set
// "source"). keys may be nil: only the first two forms are recognised then.
func NodeBound(affinity *v1.VolumeNodeAffinity, keys NodeKeys) bool {
	if affinity == nil || affinity.Required == nil || len(affinity.Required.NodeSelectorTerms) == 0 {
		return false
	}
	for _, term := range affinity.Required.NodeSelectorTerms {
		if !termNamesNode(term, keys) {
			return false
		}
	}
	return true
}

// termNamesNode says whether some requirement of a term names one node.
func termNamesNode(term v1.NodeSelectorTerm, keys NodeKeys) bool {
	for _, f := range term.MatchFields {
		if f.Key == "metadata.name" && f.Operator == v1.NodeSelectorOpIn && len(f.Values) == 1 {
			return true
		}
	}
	for _, e := range term.MatchExpressions {
		if e.Operator != v1.NodeSelectorOpIn || len(e.Values) != 1 {
			continue
		}
		if e.Key == v1.LabelHostname {
			return true
		}
		if keys == nil {
			continue
		}
		if ks, ok := keys(e.Values[0]); ok {
			for _, k := range ks {
				if k == e.Key {
					return true
				}
			}
		}
	}
	return false
}
