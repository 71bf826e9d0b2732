// Package scheduler is the core of the companion scheduler filter for one
// CSI driver's delayed-binding volumes, independent of its front ends (a
// kube-scheduler plugin and an HTTP extender, which a later change adds).
//
// For a pod it considers the claims whose class belongs to the driver:
// unbound WaitForFirstConsumer claims, and bound claims whose PV is the
// driver's. Filter rejects a node, with a typed reason, when the driver is
// not registered there, the node lacks a label for one of the driver's
// topology keys, the node is outside a class's allowedTopologies, the
// node's attach limit (package limits, pending provisions included) would be
// exceeded, the capacity of the node's segment for a class is below the sum
// of the pod's requests for that class plus the reservations in flight
// there (the Ledger), or a bound volume's node affinity excludes the node.
// Score favours nodes whose segment keeps the most free capacity.
//
// Every read comes from listers and the ledger; Filter for one node costs
// O(claims of the pod), not O(nodes) or O(PVs).
package scheduler
