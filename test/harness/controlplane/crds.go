package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
)

// SnapshotModule is the Go module whose config/crd holds the VolumeSnapshot
// CRDs, at the version the project's go.mod pins.
const SnapshotModule = "github.com/kubernetes-csi/external-snapshotter/client/v8"

// snapshotCRDFiles are the CRDs of snapshot.storage.k8s.io (not the group
// snapshot ones).
var snapshotCRDFiles = []string{
	"snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
	"snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
	"snapshot.storage.k8s.io_volumesnapshots.yaml",
}

// ModuleDir returns the module cache directory of a module at the version
// the project's go.mod requires (go list -m; nothing is downloaded that
// go.sum does not pin).
func ModuleDir(ctx context.Context, repoRoot, module string) (string, error) {
	cmd, cleanup := goCommand(ctx, repoRoot, "list", "-m", "-json", module)
	defer cleanup()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	var m struct{ Dir, Version string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("module %s@%s is not in the module cache (go mod download)", module, m.Version)
	}
	return m.Dir, nil
}

// InstallSnapshotCRDs installs the VolumeSnapshot, VolumeSnapshotContent and
// VolumeSnapshotClass CRDs from the pinned external-snapshotter client
// module and waits until the API serves them.
func (c *Cluster) InstallSnapshotCRDs(ctx context.Context) error {
	dir, err := ModuleDir(ctx, c.RepoRoot, SnapshotModule)
	if err != nil {
		return err
	}
	for _, f := range snapshotCRDFiles {
		if err := c.ApplyFile(ctx, filepath.Join(dir, "config", "crd", f), false); err != nil {
			return fmt.Errorf("installing snapshot CRDs: %w", err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	return c.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion("snapshot.storage.k8s.io/v1")
		if err != nil {
			return false, nil
		}
		have := map[string]bool{}
		for _, r := range list.APIResources {
			have[r.Name] = true
		}
		for _, f := range snapshotCRDFiles {
			name := strings.TrimSuffix(strings.TrimPrefix(f, "snapshot.storage.k8s.io_"), ".yaml")
			if !have[name] {
				return false, nil
			}
		}
		return true, nil
	})
}

// referenceGrantCRD is the ReferenceGrant CRD of gateway.networking.k8s.io,
// served as v1beta1 (the version external-provisioner's informer lists),
// with its spec's schema left open: the API server stores what a test
// writes, and the provisioner reads from and to. A *.k8s.io group needs
// the approval annotation; this is Gateway API's own.
const referenceGrantCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: referencegrants.gateway.networking.k8s.io
  annotations:
    api-approved.kubernetes.io: https://github.com/kubernetes-sigs/gateway-api/pull/2466
spec:
  group: gateway.networking.k8s.io
  names:
    kind: ReferenceGrant
    listKind: ReferenceGrantList
    plural: referencegrants
    singular: referencegrant
    shortNames: [refgrant]
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

// InstallReferenceGrantCRD installs the ReferenceGrant CRD (v1beta1), which
// data sources in another namespace need (CrossNamespaceVolumeDataSource),
// and waits until the API serves it.
func (c *Cluster) InstallReferenceGrantCRD(ctx context.Context) error {
	if err := c.ApplyYAML(ctx, []byte(referenceGrantCRD), false); err != nil {
		return fmt.Errorf("installing the ReferenceGrant CRD: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	return c.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion("gateway.networking.k8s.io/v1beta1")
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == "referencegrants" {
				return true, nil
			}
		}
		return false, nil
	})
}
