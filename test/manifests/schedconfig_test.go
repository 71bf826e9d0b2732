package manifests

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/scheduler/plugin"
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

// pluginConfigFile is the component's ConfigMap with the scheduler
// configuration every overlay patches.
const pluginConfigFile = "deploy/kubernetes/components/scheduler-plugin/config.yaml"

// placeholderDriver is the driver name of the base and the components.
const placeholderDriver = "csi.example.com"

// componentSchedulerConfig reads, decodes and validates the scheduler
// configuration inside the component's ConfigMap.
func componentSchedulerConfig(t *testing.T) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cluster.RepoRoot, pluginConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatalf("%s: %v", pluginConfigFile, err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "csi-topology-scheduler-config" || len(cm.Data) != 1 || cm.Data["config.yaml"] == "" {
		t.Fatalf("%s: want the ConfigMap csi-topology-scheduler-config with the one key config.yaml, got %s %s with keys %v",
			pluginConfigFile, cm.Kind, cm.Name, slices.Collect(maps.Keys(cm.Data)))
	}
	return validateSchedulerConfig(t, pluginConfigFile, []byte(cm.Data["config.yaml"]))
}

// pluginArgs returns a copy of cfg without the CSITopology plugin arguments,
// and those arguments decoded, by profile.
func pluginArgs(t *testing.T, what string, cfg *schedconfig.KubeSchedulerConfiguration) (*schedconfig.KubeSchedulerConfiguration, map[string]plugin.Args) {
	t.Helper()
	cfg = cfg.DeepCopy()
	args := map[string]plugin.Args{}
	for i := range cfg.Profiles {
		p := &cfg.Profiles[i]
		for j := range p.PluginConfig {
			if p.PluginConfig[j].Name != plugin.Name {
				continue
			}
			a, err := plugin.DecodeArgs(p.PluginConfig[j].Args)
			if err != nil {
				t.Errorf("%s: profile %s: %v", what, p.SchedulerName, err)
			}
			args[p.SchedulerName] = a
			p.PluginConfig[j].Args = nil
		}
	}
	return cfg, args
}

// TestSchedulerPluginConfig validates the component's scheduler
// configuration as kube-scheduler does, and the plugin's arguments as the
// plugin does.
func TestSchedulerPluginConfig(t *testing.T) {
	cfg, args := pluginArgs(t, pluginConfigFile, componentSchedulerConfig(t))
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "csi-topology-scheduler" {
		t.Fatalf("%s: want the one profile csi-topology-scheduler, got %d", pluginConfigFile, len(cfg.Profiles))
	}
	p := cfg.Profiles[0].Plugins
	for _, set := range []struct {
		point string
		set   schedconfig.PluginSet
	}{
		{"preFilter", p.PreFilter}, {"filter", p.Filter}, {"preScore", p.PreScore}, {"score", p.Score}, {"reserve", p.Reserve},
	} {
		if !slices.ContainsFunc(set.set.Enabled, func(e schedconfig.Plugin) bool { return e.Name == plugin.Name }) {
			t.Errorf("%s: %s does not enable %s", pluginConfigFile, set.point, plugin.Name)
		}
	}
	if a, ok := args["csi-topology-scheduler"]; !ok || a.DriverName != placeholderDriver {
		t.Errorf("%s: %s args %+v, want driverName %s", pluginConfigFile, plugin.Name, a, placeholderDriver)
	}
	if !cfg.LeaderElection.LeaderElect || cfg.LeaderElection.ResourceName != "csi-topology-scheduler" || cfg.LeaderElection.ResourceNamespace != "csi-topology" {
		t.Errorf("%s: leader election %+v, want the Lease csi-topology/csi-topology-scheduler its RBAC grants", pluginConfigFile, cfg.LeaderElection)
	}
}

// checkSchedulerConfigCopy validates a rendered copy of the plugin's
// scheduler configuration (an overlay patches it whole to set the driver
// name) and checks it equals the component's but for the driver name.
func checkSchedulerConfigCopy(t *testing.T, what string, data []byte) {
	t.Helper()
	base, baseArgs := pluginArgs(t, pluginConfigFile, componentSchedulerConfig(t))
	copied, copiedArgs := pluginArgs(t, what, validateSchedulerConfig(t, what, data))
	for profile, a := range copiedArgs {
		a.DriverName = placeholderDriver
		copiedArgs[profile] = a
	}
	if diff := cmp.Diff(base, copied); diff != "" {
		t.Errorf("%s drifted from %s (-component +copy):\n%s", what, pluginConfigFile, diff)
	}
	if diff := cmp.Diff(baseArgs, copiedArgs); diff != "" {
		t.Errorf("%s: %s arguments differ from %s in more than driverName (-component +copy):\n%s", what, plugin.Name, pluginConfigFile, diff)
	}
}
