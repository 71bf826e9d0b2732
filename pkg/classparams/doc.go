// Package classparams reads a StorageClass's parameters as upstream
// external-provisioner does: it splits them into what reaches the CSI driver
// and what the provisioner consumes (the csi.storage.k8s.io/ keys: fstype
// and secret references, deprecated spellings included), refuses unknown
// reserved keys and inconsistent ones (ErrInvalidParameter), and resolves
// the secret templates (${pv.name}, ${pvc.name}, ${pvc.namespace},
// ${pvc.annotations['key']}) for a claim (ErrSecretTemplate). It reads no
// API object and imports nothing of ours.
package classparams
