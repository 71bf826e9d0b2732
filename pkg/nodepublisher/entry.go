package nodepublisher

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
)

// AnnNodeID is the Node annotation that maps driver names to node IDs, as
// kubelet maintains it.
const AnnNodeID = "csi.volume.kubernetes.io/nodeid"

// ErrNegativeCount is returned when --reserved-volumes exceeds what the
// driver reports: a configuration error.
var ErrNegativeCount = errors.New("reserved volumes exceed the driver's max_volumes_per_node")

// DriverEntry builds the CSINode driver entry from NodeGetInfo: node ID,
// sorted topology keys and allocatable count max_volumes_per_node - reserved
// (nil when the driver reports 0, i.e. no limit).
func DriverEntry(driver string, info *csi.NodeGetInfoResponse, reserved int64) (storagev1.CSINodeDriver, error) {
	entry := storagev1.CSINodeDriver{Name: driver, NodeID: info.GetNodeId()}
	if entry.NodeID == "" {
		return entry, fmt.Errorf("driver %q returned an empty node ID", driver)
	}
	for k := range info.GetAccessibleTopology().GetSegments() {
		entry.TopologyKeys = append(entry.TopologyKeys, k)
	}
	sort.Strings(entry.TopologyKeys)
	if max := info.GetMaxVolumesPerNode(); max > 0 {
		n := max - reserved
		if n < 0 {
			return entry, fmt.Errorf("%w: driver reports %d volumes per node, --reserved-volumes is %d", ErrNegativeCount, max, reserved)
		}
		c := int32(n)
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: &c}
	}
	return entry, nil
}

// sameEntry reports whether two entries publish the same thing.
func sameEntry(a, b storagev1.CSINodeDriver) bool {
	if a.Name != b.Name || a.NodeID != b.NodeID || len(a.TopologyKeys) != len(b.TopologyKeys) {
		return false
	}
	ak := append([]string(nil), a.TopologyKeys...)
	bk := append([]string(nil), b.TopologyKeys...)
	sort.Strings(ak)
	sort.Strings(bk)
	for i := range ak {
		if ak[i] != bk[i] {
			return false
		}
	}
	ac, bc := allocatableCount(a), allocatableCount(b)
	switch {
	case ac == nil && bc == nil:
		return true
	case ac == nil || bc == nil:
		return false
	default:
		return *ac == *bc
	}
}

// withoutEntry returns drivers without the entry of driver.
func withoutEntry(drivers []storagev1.CSINodeDriver, driver string) []storagev1.CSINodeDriver {
	out := make([]storagev1.CSINodeDriver, 0, len(drivers))
	for _, d := range drivers {
		if d.Name != driver {
			out = append(out, d)
		}
	}
	return out
}

// nodeIDAnnotation returns the annotation value with driver -> nodeID set,
// keeping other drivers' IDs, and whether it changed.
func nodeIDAnnotation(current, driver, nodeID string) (string, bool, error) {
	ids := map[string]string{}
	if current != "" {
		if err := json.Unmarshal([]byte(current), &ids); err != nil {
			return "", false, fmt.Errorf("annotation %s holds %q, not a JSON map: %w", AnnNodeID, current, err)
		}
	}
	if ids[driver] == nodeID {
		return current, false, nil
	}
	ids[driver] = nodeID
	data, err := json.Marshal(ids)
	return string(data), true, err
}

func allocatableCount(d storagev1.CSINodeDriver) *int32 {
	if d.Allocatable == nil {
		return nil
	}
	return d.Allocatable.Count
}
