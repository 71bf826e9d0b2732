// Package controlplane builds and runs a local Kubernetes control plane for
// the end-to-end tests and `make run`: etcd, kube-apiserver,
// kube-controller-manager (PV binder and protection, service accounts,
// StatefulSets) and kube-scheduler, built from the pinned modules of the
// nested module in k8s/, all on 127.0.0.1 with free ports in a temp dir,
// token authentication, RBAC and generated service-account keys. No kubelet
// runs: nodes are Node objects made Ready through the API (test/harness/kubeletnode
// adds real ones, each a kubelet and a containerd on this host).
//
// Typical use in a test package:
//
//	var cluster *controlplane.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(controlplane.RunTestMain(m, controlplane.Options{},
//			func(ctx context.Context, c *controlplane.Cluster) error { cluster = c; return nil }))
//	}
//
// Binaries are cached in the user's cache directory (see ControlPlaneDir),
// keyed by the nested module and the Go version, so every clone of a commit
// shares them; `make controlplane` builds them with progress lines. Every process started here dies with
// the test binary (Pdeathsig), and Stop removes the temp dir.
package controlplane
