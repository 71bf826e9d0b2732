//go:build tools

// Package k8s pins the Kubernetes commands that the local test control plane
// builds, and kubelet, which the lab's real nodes run (test/harness/kubeletnode).
// It is a module of its own because k8s.io/kubernetes v1.36.3
// (kube-controller-manager's CSI volume plugin) does not compile against CSI
// spec v1.13.0, which the project's csi-lib-utils and csi-test require.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
