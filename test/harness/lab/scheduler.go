package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// SecondSchedulerName is the profile of the shipped second scheduler
// (deploy/kubernetes/components/scheduler-plugin): pods opt in with
// spec.schedulerName.
const SecondSchedulerName = "csi-topology-scheduler"

// PluginScheduler says how PluginSchedulerConfig runs the CSITopology plugin.
type PluginScheduler struct {
	// LeaderElection are the fields of the configuration's leaderElection,
	// one YAML line each ("leaderElect: true"); none is "leaderElect: false".
	LeaderElection []string
	// Args are the plugin's args beside driverName (DriverName), as YAML
	// flow mapping entries ("capacity: true").
	Args []string
}

// PluginSchedulerConfig returns a KubeSchedulerConfiguration (for
// controlplane.Options.SchedulerConfig) that runs the CSITopology plugin at
// every extension point it implements (preFilter, filter, preScore, score
// with weight 3, reserve) in the cluster's only scheduler profile,
// default-scheduler. For example, PluginSchedulerConfig(PluginScheduler{})
// ends in
//
//	pluginConfig:
//	  - name: CSITopology
//	    args: {driverName: mock.csi.example.com}
func PluginSchedulerConfig(s PluginScheduler) string {
	election := s.LeaderElection
	if len(election) == 0 {
		election = []string{"leaderElect: false"}
	}
	args := append([]string{"driverName: " + DriverName}, s.Args...)
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{{KUBECONFIG}}"
leaderElection:
  ` + strings.Join(election, "\n  ") + `
profiles:
  - schedulerName: default-scheduler
    plugins:
      preFilter: {enabled: [{name: CSITopology}]}
      filter: {enabled: [{name: CSITopology}]}
      preScore: {enabled: [{name: CSITopology}]}
      score: {enabled: [{name: CSITopology, weight: 3}]}
      reserve: {enabled: [{name: CSITopology}]}
    pluginConfig:
      - name: CSITopology
        args: {` + strings.Join(args, ", ") + `}
`
}

// ShippedSchedulerConfig returns the KubeSchedulerConfiguration that the
// mock overlay (deploy/kubernetes/overlays/mock) ships in its ConfigMap
// csi-topology-scheduler-config, rendered by kustomize as a user would.
func ShippedSchedulerConfig(repoRoot string) ([]byte, error) {
	dir := filepath.Join(repoRoot, "deploy", "kubernetes", "overlays", "mock")
	objs, err := controlplane.RenderKustomization(dir)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if obj.GetKind() == "ConfigMap" && obj.GetName() == "csi-topology-scheduler-config" {
			cfg, _, err := unstructured.NestedString(obj.Object, "data", "config.yaml")
			if err != nil || cfg == "" {
				return nil, fmt.Errorf("ConfigMap csi-topology-scheduler-config has no config.yaml: %v", err)
			}
			return []byte(cfg), nil
		}
	}
	return nil, fmt.Errorf("no ConfigMap csi-topology-scheduler-config in %s", dir)
}

// StartSecondScheduler runs binary (csi-topology-scheduler) beside the
// cluster's scheduler the way deploy/ ships it: the overlay's configuration
// (profile SecondSchedulerName, leader election on its Lease), under its
// ServiceAccount with the component's RBAC file. Only the API connection
// and the serving port are the test's own. It waits until the scheduler
// holds its Lease.
func (l *Lab) StartSecondScheduler(ctx context.Context, binary string) (*controlplane.Process, error) {
	c := l.Cluster
	if err := c.ApplyFile(ctx, filepath.Join(c.RepoRoot, "deploy", "kubernetes", "components", "scheduler-plugin", "rbac.yaml"), false); err != nil {
		return nil, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, "csi-topology", "csi-topology-scheduler")
	if err != nil {
		return nil, err
	}
	shipped, err := ShippedSchedulerConfig(c.RepoRoot)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		return nil, fmt.Errorf("shipped scheduler configuration: %w", err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir, "second-scheduler-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := c.StartProcess("csi-topology-scheduler", binary, []string{
		"--config=" + path, "--bind-address=127.0.0.1", "--secure-port=" + port, "--cert-dir=" + filepath.Join(dir, "certs"),
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
	}, nil)
	if err != nil {
		return nil, err
	}
	err = c.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("csi-topology-scheduler exited; see %s", c.LogDir)
		}
		lease, err := c.Client.CoordinationV1().Leases("csi-topology").Get(ctx, "csi-topology-scheduler", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("second scheduler holds no Lease: %w", err)
	}
	return p, nil
}
