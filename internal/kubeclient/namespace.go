package kubeclient

import (
	"os"
	"strings"
)

// ServiceAccountNamespaceFile is where a pod finds its own namespace.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace returns the namespace of the pod this process runs in: $NAMESPACE
// (set from the downward API by the shipped manifests), else the namespace of
// the pod's service account (nsFile, normally ServiceAccountNamespaceFile),
// else "" outside a pod.
func PodNamespace(nsFile string) string {
	if ns := os.Getenv("NAMESPACE"); ns != "" {
		return ns
	}
	return ServiceAccountNamespace(nsFile)
}

// ServiceAccountNamespace returns the namespace of the pod's service account
// read from nsFile (normally ServiceAccountNamespaceFile), or "" when the
// file is absent (outside a pod) or empty.
func ServiceAccountNamespace(nsFile string) string {
	data, err := os.ReadFile(nsFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
