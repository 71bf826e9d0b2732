// Package capacity publishes the CSIStorageCapacity objects of a CSI driver:
// one per (topology segment, delayed-binding StorageClass of the driver),
// with the figure of the driver's GetCapacity for that segment and the
// class's parameters (Publisher).
//
// The objects are refreshed every Config.PollInterval, at once for a
// segment a provision or a deletion touched (Touch, Refresh), and when a
// segment appears or a class of the driver comes, changes or goes
// (TouchSegment, TouchAll, ClassEventHandler). They carry
// external-provisioner's labels and names (ManagedBy, csisc-<hash>), and the
// publisher adopts the objects of external-provisioner and of earlier
// releases (LegacyManagedBy), so that either sidecar takes over the other's
// objects. Metrics records the writes; NewCollector computes upstream's
// csistoragecapacities_* gauges when scraped.
//
// The package knows nothing of the provisioner: it reads the segment index
// of package topology, StorageClass and CSIStorageCapacity listers, and
// calls the driver through Client. The provisioner wires it in
// (provisioner.NewController) and tells it which segments its provisions
// and deletions touched.
package capacity
