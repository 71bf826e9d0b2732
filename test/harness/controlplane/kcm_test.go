package controlplane

import (
	"slices"
	"testing"
)

// TestWithSecurePort: a restarted kube-controller-manager's command line
// names its new port wherever the old one was, and nothing else changes.
func TestWithSecurePort(t *testing.T) {
	args := []string{"--kubeconfig=k", "--secure-port=38197", "--controllers=*", "--secure-port=1"}
	got := withSecurePort(args, 40001)
	want := []string{"--kubeconfig=k", "--secure-port=40001", "--controllers=*", "--secure-port=40001"}
	if !slices.Equal(got, want) {
		t.Errorf("withSecurePort = %v, want %v", got, want)
	}
	if args[1] != "--secure-port=38197" {
		t.Errorf("the original command line changed: %v", args)
	}
}
