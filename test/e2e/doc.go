// Package e2e holds the end-to-end tests: the real kube-apiserver,
// kube-controller-manager and kube-scheduler of test/controlplane, the real
// csi-provisioner and mock-driver binaries (test/lab), and assertions on API
// objects and on the mock driver's state.
package e2e
