// Package nodedeploy is node deployment (upstream external-provisioner's
// --node-deployment): a csi-provisioner on every node, beside a node-local
// driver, each handling only what concerns its node.
//
// It gives the provisioning core two things and reads nothing of it:
//
//   - the ownership decision: whether this instance provisions a claim
//     (Config.OwnsClaim: its selected node is this node) and deletes the
//     volume of a PV (Config.OwnsVolume: its node affinity admits the
//     node), and the label the instance writes where it decides the node
//     (LabelVolume, HandBackLabel);
//   - the informers' scope: a field selector for the node's own Node and
//     CSINode (NodeFieldSelector), label selectors for its claims and PVs
//     with selection by label (ScopeInformers), the cache transform that
//     stubs other nodes' claims and PVs (Transform), and which claim the
//     library's store keeps after its own write (KeepAfterWrite).
//
// With Config.ImmediateBinding, the Claimer takes immediate-binding claims
// for the node; the core answers its one question (may this node take the
// claim now?) through ClaimerConfig.Check.
//
// A nil *Config is a central provisioner: it owns every claim and PV.
package nodedeploy
