// Package contract spells, once, the names that travel between our
// binaries and the cluster: the finalizer of the provisioner's in-flight
// record, the name of its leader-election Lease, the reasons of the Events
// it posts on claims, and the annotations on those Events that say, as
// typed values, why a provision failed. A reader of another binary's
// output (kubectl-csi_topology explain reading the provisioner's Events)
// matches these values, never the prose of a message, so that rewording a
// message cannot silently change what the reader concludes.
//
// Names Kubernetes already exports are taken from there and not repeated
// here: the claim annotations volume.kubernetes.io/selected-node
// (AnnSelectedNode), volume.kubernetes.io/storage-provisioner and
// pv.kubernetes.io/bind-completed come from
// k8s.io/component-helpers/storage/volume.
//
// The package imports nothing of ours and nothing of Kubernetes, so that
// every package may import it (pkg/topology included).
package contract
