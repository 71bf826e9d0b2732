// Package heartbeat keeps a CSI driver's heartbeat Lease on its node renewed
// while the driver answers Probe (Heartbeat, run by csi-node-publisher), and
// answers whether a driver is live on a node from those Leases (Liveness,
// LeaseLive, read by the scheduler filter). LeaseName, LeaseDriverLabel,
// LeaseListOptions and AddLeaseIndexer are what writer and readers agree on.
package heartbeat
