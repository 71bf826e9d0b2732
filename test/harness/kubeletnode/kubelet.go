package kubeletnode

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// kubeletConfig is the node's KubeletConfiguration; docs/real-nodes.md
// explains each setting. What makes several kubelets coexist on one host:
// a cgroupRoot, root directory, pod log directory, ports and runtime
// socket of their own. What makes them run here: cgroupfs on cgroup v1
// (failCgroupV1: false), no swap check, eviction thresholds that a shared
// disk does not trip, and no image garbage collection (the images come
// from no registry).
func (n *Node) kubeletConfig() string {
	sock := "unix://" + n.ContainerdSocket
	lines := []string{
		"apiVersion: kubelet.config.k8s.io/v1beta1",
		"kind: KubeletConfiguration",
		"failCgroupV1: false",
		"cgroupDriver: cgroupfs",
		"cgroupRoot: " + n.CgroupRoot,
		"cgroupsPerQOS: true",
		"enforceNodeAllocatable: [pods]",
		"containerRuntimeEndpoint: " + sock,
		"imageServiceEndpoint: " + sock,
		"address: 127.0.0.1",
		"port: " + strconv.Itoa(n.KubeletPort),
		"readOnlyPort: 0",
		"healthzBindAddress: 127.0.0.1",
		"healthzPort: " + strconv.Itoa(n.HealthzPort),
		"authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}",
		"authorization: {mode: AlwaysAllow}",
		"podLogsDir: " + n.path("pod-logs"),
		"failSwapOn: false",
		"evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}",
		"mergeDefaultEvictionSettings: false",
		"imageGCHighThresholdPercent: 100",
		"imageGCLowThresholdPercent: 99",
		"serializeImagePulls: false",
		"resolvConf: /etc/resolv.conf",
		"clusterDomain: cluster.local",
		"nodeStatusReportFrequency: 1m",
		"fileCheckFrequency: 1h",
		"syncFrequency: 10s",
		"rotateCertificates: false",
		"serverTLSBootstrap: false",
		"maxPods: 50",
		"",
	}
	return strings.Join(lines, "\n")
}

// startKubelet writes the node's kubelet configuration and starts kubelet
// with the cluster's kubeconfig, registering the node with its labels.
func (n *Node) startKubelet() error {
	if err := os.MkdirAll(n.path("pod-logs"), 0o755); err != nil {
		return err
	}
	cfg := n.path("kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig()), 0o644); err != nil {
		return err
	}
	var labels []string
	for k, v := range n.Labels {
		labels = append(labels, k+"="+v)
	}
	args := []string{
		"--config=" + cfg,
		"--kubeconfig=" + n.cluster.Kubeconfig,
		"--root-dir=" + KubeletRoot,
		"--cert-dir=" + KubeletRoot + "/pki",
		"--hostname-override=" + n.Name,
		"--v=2",
	}
	if len(labels) != 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	p, err := n.inNamespace(n.Name+"-kubelet", n.bins.Kubelet, args, nil)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// waitHealthy waits until the node's kubelet answers on its healthz port.
func (n *Node) waitHealthy(ctx context.Context, timeout time.Duration) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.HealthzPort)
	return n.waitFor(ctx, timeout, "kubelet healthz at "+url, func() error {
		if n.kubelet.Exited() {
			return fmt.Errorf("%w: kubelet exited (log: %s)", errGiveUp, n.kubelet.LogPath())
		}
		return httpOK(ctx, url)
	})
}
