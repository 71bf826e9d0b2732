package e2erealnode

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// nodeDriver says how deployNodeDriver runs deploy/'s node DaemonSet.
type nodeDriver struct {
	// node is the one real node the DaemonSet runs on (a nodeSelector):
	// a test pays for the pods it looks at only.
	node string
	// driverArgs and publisherArgs are appended to the mock driver's and to
	// csi-node-publisher's arguments.
	driverArgs, publisherArgs []string
}

// isNodeSide says whether obj of mockOverlay is part of what a node runs:
// the namespace, csi-node-publisher's ServiceAccount and RBAC, the
// CSIDriver, the mock's ConfigMap and the node DaemonSet.
func isNodeSide(obj *unstructured.Unstructured) bool {
	name := obj.GetName()
	switch obj.GetKind() {
	case "Namespace", "CSIDriver":
		return true
	case "ServiceAccount":
		return name == "csi-node-publisher"
	case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return strings.HasPrefix(name, "csi-topology-node-publisher")
	case "ConfigMap":
		return name == "mock-driver-config"
	case "DaemonSet":
		return name == "csi-node"
	}
	return false
}

// deployNodeDriver applies the node side of deploy/'s mock overlay,
// rendered by kustomize, with nd's changes to the DaemonSet, and returns
// the DaemonSet and the CSIDriver as applied (the test may update the
// latter). It does not wait for the pods; the test's cleanup removes
// what later tests would meet (removeNodeDriver).
func deployNodeDriver(ctx context.Context, t *testing.T, nd nodeDriver) (*appsv1.DaemonSet, *unstructured.Unstructured) {
	t.Helper()
	objs, err := controlplane.RenderKustomization(filepath.Join(cluster.RepoRoot, mockOverlay))
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	var ds *appsv1.DaemonSet
	var csiDriver *unstructured.Unstructured
	for _, o := range objs {
		if !isNodeSide(o) {
			continue
		}
		obj := o.Object
		switch o.GetKind() {
		case "DaemonSet":
			ds = &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
			nd.apply(t, ds)
			if obj, err = runtime.DefaultUnstructuredConverter.ToUnstructured(ds); err != nil {
				t.Fatal(err)
			}
		case "CSIDriver":
			csiDriver = o
		}
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(append(stream, data...), '\n')
	}
	if ds == nil || csiDriver == nil {
		t.Fatalf("%s renders no DaemonSet csi-node or no CSIDriver", mockOverlay)
	}
	waitNamespaceGone(ctx, t, ds.Namespace)
	tagNodeDriverImages(ctx, t, ds)
	if err := cluster.ApplyYAML(ctx, stream, false); err != nil {
		t.Fatalf("applying the node side of %s: %v", mockOverlay, err)
	}
	t.Cleanup(func() { removeNodeDriver(ctx, t, ds) })
	return ds, csiDriver
}

// tagNodeDriverImages gives, on every node, the lab's images the names the
// DaemonSet's containers use: the project's by their binary, the upstream
// node-driver-registrar's the lab's registrar.
func tagNodeDriverImages(ctx context.Context, t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
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

// removeNodeDriver deletes what deployNodeDriver applied that later tests
// would meet: the namespace (the DaemonSet and its pods with it), waiting
// until it is gone, and the CSIDriver; then it forgets the driver's
// registrations (forgetDriver). The cluster-scoped RBAC stays: applying
// again updates it.
func removeNodeDriver(ctx context.Context, t *testing.T, ds *appsv1.DaemonSet) {
	_ = cluster.Client.CoreV1().Namespaces().Delete(ctx, ds.Namespace, metav1.DeleteOptions{})
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, ds.Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s is still there: %v; pods: %s", ds.Namespace, err, daemonSetPods(ctx, ds))
	}
	_ = cluster.Client.StorageV1().CSIDrivers().Delete(ctx, driver.DefaultName, metav1.DeleteOptions{})
	forgetDriver(ctx, t, realNodes...)
}

// apply makes nd's changes to the DaemonSet.
func (nd nodeDriver) apply(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := &ds.Spec.Template.Spec
	spec.NodeSelector = map[string]string{v1.LabelHostname: nd.node}
	for name, args := range map[string][]string{"csi-driver": nd.driverArgs, "csi-node-publisher": nd.publisherArgs} {
		i := slices.IndexFunc(spec.Containers, func(c v1.Container) bool { return c.Name == name })
		if i < 0 {
			t.Fatalf("DaemonSet %s has no container %s", ds.Name, name)
		}
		spec.Containers[i].Args = append(spec.Containers[i].Args, args...)
	}
	// The lab's stand-in registrar image runs as 65532, upstream's
	// node-driver-registrar image as root: as 65532 it cannot connect to
	// the driver's socket (root, 0755), never registers the driver, and
	// kubelet never writes the CSINode. Run it as upstream's runs.
	i := slices.IndexFunc(spec.Containers, func(c v1.Container) bool { return c.Name == "node-driver-registrar" })
	if i < 0 {
		t.Fatalf("DaemonSet %s has no container node-driver-registrar", ds.Name)
	}
	if spec.Containers[i].SecurityContext == nil {
		spec.Containers[i].SecurityContext = &v1.SecurityContext{}
	}
	spec.Containers[i].SecurityContext.RunAsUser = ptr.To[int64](0)
}

// waitNamespaceGone waits until namespace, deleted by an earlier test, is
// gone, so that what a test applies there is not refused as terminating.
func waitNamespaceGone(ctx context.Context, t *testing.T, namespace string) {
	t.Helper()
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s is still there: %v", namespace, err)
	}
}

// nodePodRunning says whether ds has a pod on node with every container
// running and ready, and if not, what its pods are.
func nodePodRunning(ctx context.Context, ds *appsv1.DaemonSet, node string) (*v1.Pod, string) {
	pods, err := cluster.Client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err.Error()
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning ||
			len(p.Status.ContainerStatuses) != len(ds.Spec.Template.Spec.Containers) {
			continue
		}
		ready := true
		for _, c := range p.Status.ContainerStatuses {
			ready = ready && c.Ready
		}
		if ready {
			return p, ""
		}
	}
	return nil, "pods:" + daemonSetPods(ctx, ds)
}
