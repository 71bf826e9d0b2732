package kubeletnode

import (
	"fmt"
	"net/url"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// Controllers are the kube-controller-manager controllers a plane with
// real nodes runs: controlplane.DefaultControllers, the root CA publisher,
// whose kube-root-ca.crt ConfigMap every pod's service-account token volume
// needs, and the DaemonSet controller, for drivers' node plugins.
var Controllers = append(slices.Clone(controlplane.DefaultControllers),
	"root-ca-certificate-publisher-controller", "daemonset-controller")

// InClusterEnv are the environment variables that point a pod's in-cluster
// client (rest.InClusterConfig) at the lab's API server, which listens on
// 127.0.0.1 only: the pod must use the host's network (hostNetwork: true).
// A container's own variables override the service variables kubelet
// injects (KUBERNETES_SERVICE_HOST is the kubernetes Service's cluster IP,
// which nothing routes here: the lab runs no kube-proxy). The API server's
// self-signed serving certificate names 127.0.0.1, and its CA is in the
// kube-root-ca.crt ConfigMap, so the client verifies it as in a cluster.
func InClusterEnv(c *controlplane.Cluster) ([]v1.EnvVar, error) {
	u, err := url.Parse(c.RESTConfig.Host)
	if err != nil {
		return nil, fmt.Errorf("the API server's address %q: %w", c.RESTConfig.Host, err)
	}
	return []v1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: u.Hostname()},
		{Name: "KUBERNETES_SERVICE_PORT", Value: u.Port()},
	}, nil
}
