// Command controlplane is `make controlplane` and step 4 of `make test`: it
// builds etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// from the nested module test/harness/controlplane/k8s, or finds them cached (see
// controlplane.ControlPlaneDir), then upstream external-provisioner for the
// differential tests (controlplane.BuildUpstream), then kubelet, containerd and
// the CNI plugins for the real nodes (kubeletnode.BuildBinaries), and prints
// where they are. Building them here, before the test packages, keeps the
// build out of the test binaries' timeouts; the tests still build them when
// run on their own.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		os.Exit(1)
	}
	start := time.Now()
	bins, err := controlplane.BuildControlPlane(ctx, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		os.Exit(1)
	}
	fmt.Printf("control plane ready in %s: %s\n", time.Since(start).Round(time.Second), bins.Dir())
	start = time.Now()
	up, err := controlplane.BuildUpstream(ctx, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "upstream external-provisioner:", err)
		os.Exit(1)
	}
	fmt.Printf("upstream external-provisioner %s ready in %s: %s\n", controlplane.UpstreamProvisionerVersion,
		time.Since(start).Round(time.Second), up.Provisioner)
	start = time.Now()
	nodes, err := kubeletnode.BuildBinaries(ctx, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "real nodes:", err)
		os.Exit(1)
	}
	fmt.Printf("kubelet, containerd and the CNI plugins ready in %s: %s\n", time.Since(start).Round(time.Second), filepath.Dir(nodes.Kubelet))
}
