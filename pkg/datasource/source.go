package datasource

import (
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/topology"
)

// AnnAllowVolumeModeChange on a VolumeSnapshotContent allows a restore into
// another volume mode despite Config.PreventVolumeModeConversion. The name
// is upstream external-provisioner v6.3.0's, so that a fleet that mixes
// both agrees on it. (The finalizers protecting data sources are package
// sourceprotection's.)
const AnnAllowVolumeModeChange = "snapshot.storage.kubernetes.io/allow-volume-mode-change"

// The data source kinds a Resolver serves itself.
const (
	// KindClaim is a clone's source: a PersistentVolumeClaim of the core
	// API group.
	KindClaim = "PersistentVolumeClaim"
	// KindSnapshot is a restore's source: a VolumeSnapshot of
	// snapshotGroup.
	KindSnapshot = "VolumeSnapshot"
	// snapshotGroup is the API group of VolumeSnapshot.
	snapshotGroup = snapv1.GroupName
)

// ErrRefused marks a claim whose data source cannot be used (yet):
// missing, not bound or not ready, another driver, too large, another
// volume mode. The message says which, in an operator's words.
var ErrRefused = errors.New("data source refused")

// ErrInvalidClaim marks a claim that cannot be served as written: retrying
// does not help until its author changes it. Package provisioner's
// ErrInvalidClaim is this error; a Resolver wraps it for a data source
// reference it cannot follow (another namespace, no name).
var ErrInvalidClaim = errors.New("invalid claim")

// Source is a claim's data source as a Resolver resolved it.
type Source struct {
	// Kind is KindClaim or KindSnapshot.
	Kind            string
	Namespace, Name string
	// Content goes into CreateVolume.
	Content *csi.VolumeContentSource
	// Reach is where the copy may be made (topology.CopyReach), and Basis
	// why; Affinity is the source volume's node affinity (nil when
	// unknown).
	Reach    topology.Reach
	Basis    topology.CopyBasis
	Affinity *v1.VolumeNodeAffinity
}

// String names the source, e.g. `PersistentVolumeClaim "apps/db"`.
func (s *Source) String() string {
	return fmt.Sprintf("%s %q", s.Kind, s.Namespace+"/"+s.Name)
}

// Key identifies the source for the protection controller
// (sourceprotection.Controller.Protect).
func (s *Source) Key() sourceprotection.Key {
	return sourceprotection.Key{Kind: s.Kind, Namespace: s.Namespace, Name: s.Name}
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

func claimSize(claim *v1.PersistentVolumeClaim) resource.Quantity {
	return claim.Spec.Resources.Requests[v1.ResourceStorage]
}

func volumeMode(m *v1.PersistentVolumeMode) v1.PersistentVolumeMode {
	if m == nil {
		return v1.PersistentVolumeFilesystem
	}
	return *m
}

func volumeDriver(pv *v1.PersistentVolume) string {
	if pv.Spec.CSI != nil {
		return fmt.Sprintf("CSI driver %q", pv.Spec.CSI.Driver)
	}
	return "an in-tree volume plugin"
}
