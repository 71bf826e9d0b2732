// Command apicheck is a pod's client of the API server, configured as
// in-cluster clients are (rest.InClusterConfig: KUBERNETES_SERVICE_HOST and
// _PORT, the service-account token and ca.crt). It reads its own Pod
// (POD_NAME and POD_NAMESPACE, from the downward API), prints the node the
// API server says it runs on, on stdout and in its termination message,
// and exits 0; 1 on any error.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	msg, err := check()
	if err != nil {
		msg = "error: " + err.Error()
	}
	fmt.Println(msg)
	_ = os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
	if err != nil {
		os.Exit(1)
	}
}

func check() (string, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := client.CoreV1().Pods(os.Getenv("POD_NAMESPACE")).Get(ctx, os.Getenv("POD_NAME"), metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading my pod through %s: %w", cfg.Host, err)
	}
	return "running on " + pod.Spec.NodeName, nil
}
