// Package kubeclient builds the API clients of the project's commands.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads a kubeconfig file, or the in-cluster configuration when
// kubeconfig is empty.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration (use --kubeconfig outside a cluster): %w", err)
	}
	return c, nil
}

// New returns a clientset on a copy of base with its own client-side rate
// limit and user agent.
func New(base *rest.Config, qps float64, burst int, userAgent string) (kubernetes.Interface, error) {
	c := rest.CopyConfig(base)
	c.QPS, c.Burst, c.UserAgent = float32(qps), burst, userAgent
	return kubernetes.NewForConfig(c)
}
