package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

const notReadyTaint = "node.kubernetes.io/not-ready"

// CreateNode creates a Ready node with labels and the given allocatable
// resources (default: 32 CPUs, 64 GiB, 110 pods), and removes the not-ready
// taint admission adds, as a kubelet and the node lifecycle controller would.
func (c *Cluster) CreateNode(ctx context.Context, name string, labels map[string]string, allocatable v1.ResourceList) (*v1.Node, error) {
	if allocatable == nil {
		allocatable = v1.ResourceList{}
	}
	for k, v := range map[v1.ResourceName]string{v1.ResourceCPU: "32", v1.ResourceMemory: "64Gi", v1.ResourcePods: "110"} {
		if _, ok := allocatable[k]; !ok {
			allocatable[k] = resource.MustParse(v)
		}
	}
	lbls := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		lbls[k] = v
	}
	node, err := c.Client.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating node %s: %w", name, err)
	}
	node.Status = v1.NodeStatus{
		Capacity:    allocatable,
		Allocatable: allocatable,
		Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	if node, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("making node %s ready: %w", name, err)
	}
	var taints []v1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key != notReadyTaint {
			taints = append(taints, t)
		}
	}
	if len(taints) != len(node.Spec.Taints) {
		node.Spec.Taints = taints
		if node, err = c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("removing the not-ready taint of %s: %w", name, err)
		}
	}
	return node, nil
}

// ServiceAccountKubeconfig creates the ServiceAccount if missing, requests a
// token for it, valid for a day (a 5 000-claim bench with three contenders
// outlives an hour's), and writes a kubeconfig that uses it.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * time.Hour / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return c.writeKubeconfig(fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name), tr.Status.Token)
}

// ApplyFile applies a multi-document YAML file (see ApplyYAML).
func (c *Cluster) ApplyFile(ctx context.Context, path string, dryRun bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := c.ApplyYAML(ctx, data, dryRun); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ApplyYAML creates, or updates when they exist, the objects of a
// multi-document YAML, of any kind the apiserver serves. With dryRun the
// apiserver validates them without persisting anything.
func (c *Cluster) ApplyYAML(ctx context.Context, data []byte, dryRun bool) error {
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	var opts []string
	if dryRun {
		opts = []string{metav1.DryRunAll}
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == "namespace" {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: opts, FieldValidation: metav1.FieldValidationStrict})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = ri.Update(ctx, obj, metav1.UpdateOptions{DryRun: opts, FieldValidation: metav1.FieldValidationStrict})
			}
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}
