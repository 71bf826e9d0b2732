package capacity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// managedByBase is the value of csi.storage.k8s.io/managed-by on the
// capacity objects of the central provisioner: external-provisioner's, so
// that either sidecar takes over the other's objects (docs/migrating.md).
const managedByBase = contract.CapacityManagedBy

// ManagedBy returns the csi.storage.k8s.io/managed-by label value of the
// capacity objects of a node's instance ("" for the central provisioner),
// the one external-provisioner uses: external-provisioner-<node>, and when
// that is longer than a label value may be, a shortened form with an FNV-32a
// hash (of the base when the node name fits beside it, else of the whole).
func ManagedBy(node string) string {
	if node == "" {
		return managedByBase
	}
	const maxLen = validation.LabelValueMaxLength
	v := managedByBase + "-" + node
	if len(v) <= maxLen {
		return v
	}
	if keep := maxLen - len(node) - len("-01234567-"); keep > 0 {
		return managedByBase[:keep] + "-" + fnv32Hex(managedByBase) + "-" + node
	}
	short := managedByBase + "-" + fnv32Hex(v)
	return short[:min(maxLen, len(short))]
}

// fnv32Hex is the FNV-32a hash of s in 8 hex digits.
func fnv32Hex(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

// legacyManagedByBase is the managed-by value of the central provisioner's
// capacity objects before it took external-provisioner's.
const legacyManagedByBase = "csi-topology-provisioner"

// LegacyManagedBy returns the csi.storage.k8s.io/managed-by value that
// earlier releases gave the capacity objects of a node's instance ("" for
// the central provisioner): csi-topology-provisioner[-<node>], a hash of
// the node name when too long. The publisher adopts such objects.
func LegacyManagedBy(node string) string {
	if node == "" {
		return legacyManagedByBase
	}
	v := legacyManagedByBase + "-" + node
	if len(v) <= validation.LabelValueMaxLength {
		return v
	}
	sum := sha256.Sum256([]byte(node))
	return legacyManagedByBase + "-" + hex.EncodeToString(sum[:])[:validation.LabelValueMaxLength-len(legacyManagedByBase)-1]
}
