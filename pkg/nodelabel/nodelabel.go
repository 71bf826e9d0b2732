// Package nodelabel computes the label that scopes claims and PVs to a node
// for node deployment's selection by label (csi-provisioner
// --node-deployment-selection=label, docs/node-deployment.md "Selection by
// label"): every node's instance lists and watches only the claims and PVs
// that carry its own value, and the API server does the filtering.
package nodelabel

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Key is the label on claims and PVs that names the node they belong to.
const Key = "csi-topology-provisioner.io/node"

// Prefixes of the values that are not a node name as is. '_' never appears
// in a node name (a DNS subdomain), so neither collides with a node's value.
const (
	hashedPrefix = "h_"
	poolPrefix   = "unselected_"
)

// Value returns the label value of node, or of the pool of a driver's
// unselected immediate-binding claims when node is empty:
//
//   - a node: its name when that is a valid label value (at most 63
//     characters), else "h_" and the first 40 hex digits of the SHA-256 of
//     the name;
//   - the pool (node == ""): "unselected_" and the first 10 hex digits of the
//     SHA-256 of the driver's name.
//
// csi-provisioner and csi-node-router both call it, so they agree.
func Value(node, driver string) string {
	if node == "" {
		return poolPrefix + hashHex(driver, 10)
	}
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	return hashedPrefix + hashHex(node, 40)
}

// NodeValue is Value of a node.
func NodeValue(node string) string { return Value(node, "") }

// PoolValue is Value of the pool of driver's unselected immediate-binding
// claims.
func PoolValue(driver string) string { return Value("", driver) }

// IsPool reports whether v is a pool value (of any driver).
func IsPool(v string) bool { return strings.HasPrefix(v, poolPrefix) }

func hashHex(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}
