// Package scheduler is the core of the companion scheduler filter for one
// CSI driver's delayed-binding volumes, independent of its front ends (the
// kube-scheduler plugin in plugin/ and the HTTP extender in extender/).
//
// For a pod it considers the claims whose class belongs to the driver:
// unbound WaitForFirstConsumer claims, and bound claims whose PV is the
// driver's. Filter rejects a node, with a typed reason, when the driver is
// not registered there (for bound volumes too: the node could not mount
// them), the node lacks a label for one of the driver's topology keys, the
// node is outside a class's allowedTopologies, the node's attach limit
// would be exceeded (package limits counts what is attached and pending;
// the Ledger adds pods just reserved there; a volume the node already uses
// is not new), the capacity of the node's segment for a class is below the
// sum of the pod's requests for that class plus the reservations in flight
// there, a bound volume's node affinity excludes the node, or a pending
// claim's data source is out of the node's reach: a clone
// (dataSource/dataSourceRef of kind PersistentVolumeClaim, same namespace)
// whose source claim's PV, or a restore (kind VolumeSnapshot) whose
// snapshot's source claim's PV, has a required node affinity that excludes
// the node (topology.Reach, the rule csi-provisioner intersects a clone's
// requisite with). A source not known, unbound or unconstrained constrains
// nothing, and the snapshot rule is off where VolumeSnapshots are not
// served (SnapshotInformer). Score is the weighted mean (ScoreWeights) of
// the free capacity left in the node's segment and the attach slots left
// on the node.
//
// Every read comes from listers, indexes and the ledger; Filter for one
// node costs O(claims of the pod), not O(nodes), O(PVs), O(segments) or
// O(reservations in flight) (beyond what package limits reads for the
// node).
package scheduler
