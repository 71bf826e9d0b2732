// Package limits publishes a node's CSINode entry for a driver (Publisher)
// and counts the volumes that occupy a node against the driver's attach
// limit, pending provisions included (Counter). The driver's heartbeat Lease
// and its liveness are package heartbeat's.
package limits
