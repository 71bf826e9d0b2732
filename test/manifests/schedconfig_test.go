package manifests

import (
	"testing"

	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
)

// validateSchedulerConfig decodes a KubeSchedulerConfiguration strictly,
// with defaults, and validates it as kube-scheduler does at start-up.
func validateSchedulerConfig(t *testing.T, what string, data []byte) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, gvk, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("%s: decoding the scheduler configuration: %v", what, err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("%s: decoded a %v, want a KubeSchedulerConfiguration", what, gvk)
	}
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Errorf("%s: invalid scheduler configuration: %v", what, err)
	}
	return cfg
}
