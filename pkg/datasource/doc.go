// Package datasource resolves a claim's data source for the provisioner: a
// clone's source claim and its volume, or a restore's VolumeSnapshot and its
// VolumeSnapshotContent. A Resolver checks the source the way upstream
// external-provisioner v6.3.0 does (bound, ready, same driver, large enough,
// same volume mode unless the content allows a conversion), leaves claims of
// other kinds to an external populator, and says where the copy may be made
// (topology.CopyReach, from the source volume's node affinity and the
// class's copy-placement annotation). CheckCreated checks that the driver
// made the volume from the source.
//
// SnapshotAPI follows the VolumeSnapshot API as an optional API
// (internal/optionalapi): a restore waits for it, and where RBAC lets the
// contents be listed but not watched, a restore reads its content with a
// GET. The finalizers that protect sources are package sourceprotection's.
package datasource
