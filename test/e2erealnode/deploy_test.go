package e2erealnode

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/kubeletnode"
)

// installNamespace is where deploy/ installs everything.
const installNamespace = "csi-topology"

// zoneLabel is the well-known zone label the kind quick start gives its
// workers (deploy/kind/cluster.yaml); nodeZones are the real nodes' zones,
// as the kind workers of the same names have them, and as the mock overlay's
// node-topology.yaml gives the driver.
const zoneLabel = "topology.kubernetes.io/zone"

var nodeZones = map[string]string{realNodes[0]: "z1", realNodes[1]: "z2"}

// rendered is deploy/'s mock overlay as kustomize renders it.
type rendered struct {
	// stream is every object, as one JSON stream for ApplyYAML.
	stream []byte
	// node is the node DaemonSet; deployments are the Deployments.
	node        *appsv1.DaemonSet
	deployments []*appsv1.Deployment
}

// renderOverlay renders mockOverlay as kustomize does.
func renderOverlay(t *testing.T) rendered {
	t.Helper()
	objs, err := controlplane.RenderKustomization(filepath.Join(cluster.RepoRoot, mockOverlay))
	if err != nil {
		t.Fatal(err)
	}
	var r rendered
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		r.stream = append(append(r.stream, data...), '\n')
		switch o.GetKind() {
		case "DaemonSet":
			r.node = &appsv1.DaemonSet{}
			fromUnstructured(t, o, r.node)
		case "Deployment":
			d := &appsv1.Deployment{}
			fromUnstructured(t, o, d)
			r.deployments = append(r.deployments, d)
		}
	}
	if r.node == nil || len(r.deployments) == 0 {
		t.Fatalf("%s renders no node DaemonSet or no Deployment", mockOverlay)
	}
	return r
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatal(err)
	}
}

// containers are every container of the overlay's workloads.
func (r rendered) containers() []v1.Container {
	cs := append([]v1.Container(nil), r.node.Spec.Template.Spec.Containers...)
	for _, d := range r.deployments {
		cs = append(cs, d.Spec.Template.Spec.Containers...)
	}
	return cs
}

// installOverlay applies deploy/'s mock overlay as a vendor does, with the
// lab's images under the names it uses, labels the nodes' zones as kind
// does, and waits until every workload runs: the DaemonSet on every node,
// every Deployment with all its replicas available. It is removed when the
// test ends.
func installOverlay(ctx context.Context, t *testing.T) rendered {
	t.Helper()
	r := renderOverlay(t)
	tagImages(ctx, t, r.containers()...)
	for name, zone := range nodeZones {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, zoneLabel, zone)
		if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.ApplyYAML(ctx, r.stream, false); err != nil {
		t.Fatalf("applying %s: %v", mockOverlay, err)
	}
	t.Cleanup(func() { uninstallOverlay(ctx, t) })
	var last string
	err := cluster.WaitFor(ctx, 3*podTimeout, func(ctx context.Context) (bool, error) {
		if running, msg := daemonSetRunning(ctx, r.node); !running {
			last = msg
			return false, nil
		}
		for _, d := range r.deployments {
			got, err := cluster.Client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.AvailableReplicas != *got.Spec.Replicas {
				last = fmt.Sprintf("Deployment %s: %d of %d replicas available", d.Name, got.Status.AvailableReplicas, *got.Spec.Replicas)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s never ran: %v; last: %s; pods: %s", mockOverlay, err, last, namespacePods(ctx, installNamespace))
	}
	return r
}

// uninstallOverlay deletes the install's namespace and waits until it is
// gone (its pods with it), then the CSIDriver, and forgets the driver's
// registrations (forgetDriver). The cluster-scoped RBAC and classes stay:
// applying the overlay again updates them.
func uninstallOverlay(ctx context.Context, t *testing.T) {
	_ = cluster.Client.CoreV1().Namespaces().Delete(ctx, installNamespace, metav1.DeleteOptions{})
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, installNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s is still there: %v; pods: %s", installNamespace, err, namespacePods(ctx, installNamespace))
	}
	_ = cluster.Client.StorageV1().CSIDrivers().Delete(ctx, driver.DefaultName, metav1.DeleteOptions{})
	forgetDriver(ctx, t, realNodes...)
}

// tagImages gives, on every node, the lab's images the names the
// containers use: the project's by their binary, the upstream
// node-driver-registrar's the lab's registrar.
func tagImages(ctx context.Context, t *testing.T, containers ...v1.Container) {
	t.Helper()
	for _, c := range containers {
		name, _, _ := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
		src := nodes.Images.Ref(name)
		if name == "csi-node-driver-registrar" {
			src = nodes.Images.Ref(kubeletnode.Registrar)
		}
		if src == "" {
			t.Fatalf("container %s: no lab image for %s", c.Name, c.Image)
		}
		if err := nodes.TagImage(ctx, src, c.Image); err != nil {
			t.Fatal(err)
		}
	}
}

// namespacePods says where the namespace's pods are and how they are.
func namespacePods(ctx context.Context, namespace string) string {
	pods, err := cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		fmt.Fprintf(&b, "\n%s on %q: %s", pods.Items[i].Name, pods.Items[i].Spec.NodeName, podStatus(&pods.Items[i]))
	}
	return b.String()
}
