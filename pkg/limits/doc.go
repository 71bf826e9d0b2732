// Package limits publishes a node's CSINode entry for a driver (Publisher),
// keeps the driver's heartbeat Lease on the node renewed while the driver
// answers Probe (Heartbeat), answers whether a driver is live on a node from
// those Leases (Liveness), and counts the volumes that occupy a node against
// the driver's attach limit, pending provisions included (Counter).
package limits
