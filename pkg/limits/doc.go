// Package limits counts the volumes that occupy a node against the driver's
// attach limit, pending provisions included (Counter). Publishing that limit
// in the node's CSINode entry is package nodepublisher's; the driver's
// heartbeat Lease and its liveness are package heartbeat's.
package limits
