//go:build tools

// Package mod pins the node runtime that the lab's real nodes build:
// containerd v2 with its runc shim and ctr, and the CNI plugins. It is a
// module of its own so that their dependency versions never move the
// project's go.mod nor the control plane's (test/harness/controlplane/k8s, which
// also builds kubelet).
package mod

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
)
