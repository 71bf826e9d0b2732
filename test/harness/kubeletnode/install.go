package kubeletnode

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// MockOverlay is deploy/'s kustomization of the kind quick start: the
// base, every component, the mock driver. InstallNamespace is where deploy/
// installs everything.
const (
	MockOverlay      = "deploy/kubernetes/overlays/mock"
	InstallNamespace = "csi-topology"
)

// ZoneLabel is the well-known zone label the kind quick start gives its
// workers (deploy/kind/cluster.yaml).
const ZoneLabel = "topology.kubernetes.io/zone"

// MockOverlayImages are the project's images MockOverlay runs: AddNodes
// must import them for Install.
var MockOverlayImages = []string{"mock-driver", "csi-provisioner", "csi-node-publisher", "csi-topology-scheduler", "csi-scheduler-extender"}

// InstallControllers are Controllers, those of deploy/'s Deployments, and
// the node lifecycle controller: kubelet registers its Node with the taint
// node.kubernetes.io/not-ready:NoSchedule, which only that controller
// removes once the node is Ready; until then the scheduler places no pod
// that does not tolerate it (a Deployment's).
var InstallControllers = append(slices.Clone(Controllers), "deployment-controller", "replicaset-controller", "node-lifecycle-controller")

// Install is a kustomization of deploy/ as kustomize renders it.
type Install struct {
	// Path is the kustomization, relative to the repository's root.
	Path string
	// Stream is every object, as one JSON stream for ApplyYAML.
	Stream []byte
	// Node is the node DaemonSet; Deployments are the Deployments.
	Node        *appsv1.DaemonSet
	Deployments []*appsv1.Deployment
}

// RenderInstall renders the kustomization at path (relative to repoRoot)
// as kustomize does.
func RenderInstall(repoRoot, path string) (*Install, error) {
	objs, err := controlplane.RenderKustomization(filepath.Join(repoRoot, path))
	if err != nil {
		return nil, err
	}
	in := &Install{Path: path}
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		in.Stream = append(append(in.Stream, data...), '\n')
		var into any
		switch o.GetKind() {
		case "DaemonSet":
			in.Node = &appsv1.DaemonSet{}
			into = in.Node
		case "Deployment":
			d := &appsv1.Deployment{}
			in.Deployments = append(in.Deployments, d)
			into = d
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if in.Node == nil {
		return nil, fmt.Errorf("%s renders no DaemonSet", path)
	}
	return in, nil
}

// Containers are every container of the install's workloads.
func (in *Install) Containers() []v1.Container {
	cs := slices.Clone(in.Node.Spec.Template.Spec.Containers)
	for _, d := range in.Deployments {
		cs = append(cs, d.Spec.Template.Spec.Containers...)
	}
	return cs
}

// TagImages gives, on every node, the lab's images the names the
// containers use: the project's by their binary, the upstream
// node-driver-registrar's the lab's Registrar.
func (ns *Nodes) TagImages(ctx context.Context, containers ...v1.Container) error {
	for _, c := range containers {
		name, _, _ := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
		src := ns.Images.Ref(name)
		if name == "csi-node-driver-registrar" {
			src = ns.Images.Ref(Registrar)
		}
		if src == "" {
			return fmt.Errorf("container %s: no lab image for %s", c.Name, c.Image)
		}
		if err := ns.TagImage(ctx, src, c.Image); err != nil {
			return err
		}
	}
	return nil
}

// Install applies in as a vendor does, with the lab's images under the
// names it uses, after labelling each node with its zone (ZoneLabel, zones
// by node name, as kind's cluster.yaml does), and waits until every
// workload runs: the DaemonSet ready on every node, every Deployment with
// all its replicas available.
func (ns *Nodes) Install(ctx context.Context, c *controlplane.Cluster, in *Install, zones map[string]string, timeout time.Duration) error {
	if err := ns.TagImages(ctx, in.Containers()...); err != nil {
		return err
	}
	for name, zone := range zones {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, ZoneLabel, zone)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("labelling node %s: %w", name, err)
		}
	}
	if err := c.ApplyYAML(ctx, in.Stream, false); err != nil {
		return fmt.Errorf("applying %s: %w", in.Path, err)
	}
	var last string
	err := c.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		last, err = ns.notRunning(ctx, c, in)
		return last == "", err
	})
	if err != nil {
		return fmt.Errorf("%s never ran: %w; last: %s; pods:%s", in.Path, err, last, NamespacePods(ctx, c, in.Node.Namespace))
	}
	return nil
}

// notRunning says which of in's workloads is not running yet, or "".
func (ns *Nodes) notRunning(ctx context.Context, c *controlplane.Cluster, in *Install) (string, error) {
	pods, err := c.Client.CoreV1().Pods(in.Node.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error(), nil
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if o := metav1.GetControllerOf(p); o != nil && o.Kind == "DaemonSet" && o.Name == in.Node.Name {
			ready[p.Spec.NodeName] = ready[p.Spec.NodeName] || PodReady(p)
		}
	}
	for _, n := range ns.Nodes {
		if !ready[n.Name] {
			return fmt.Sprintf("DaemonSet %s: no ready pod on %s", in.Node.Name, n.Name), nil
		}
	}
	for _, d := range in.Deployments {
		got, err := c.Client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if got.Status.AvailableReplicas != *got.Spec.Replicas {
			return fmt.Sprintf("Deployment %s: %d of %d replicas available", d.Name, got.Status.AvailableReplicas, *got.Spec.Replicas), nil
		}
	}
	return "", nil
}

// PodReady says whether the pod's Ready condition is true.
func PodReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// NamespacePods says where the namespace's pods are and how they are, one
// line each.
func NamespacePods(ctx context.Context, c *controlplane.Cluster, namespace string) string {
	pods, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n%s on %q: phase %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "; %s: %+v", s.Name, s.State)
		}
	}
	return b.String()
}
