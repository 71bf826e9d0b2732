// Package sourceprotection keeps data sources from going away while the
// driver copies them: a Controller puts a finalizer on a source claim
// (FinalizerCloneSource) or VolumeSnapshot (FinalizerSnapshotSource) before
// the provisioner's CreateVolume (Protect), and removes it once no claim
// made from the source is still waiting for its volume. It also builds the
// VolumeSnapshot informers (NewSnapshotInformers) the provisioner reads
// snapshot sources from.
package sourceprotection
