package e2erealnode

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// allowReadingPods lets the default ServiceAccount of namespace read its
// pods, as a driver's RBAC lets its sidecars.
func allowReadingPods(ctx context.Context, t *testing.T, namespace string) {
	t.Helper()
	rbac := cluster.Client.RbacV1()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-pods", Namespace: namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}},
	}
	if _, err := rbac.Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-pods", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-pods"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: namespace}},
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRealNodePodReachesAPIServer runs, on a real node, pods whose
// in-cluster client (the service-account token and the kube-root-ca.crt
// CA) reads its own Pod from the API server, TLS verified: one on the
// pod network with the kubernetes Service's address kubelet gives it (as
// deploy/'s pods run; the node routes the Service to the API server), one
// on the host's network pointed at 127.0.0.1 (kubeletnode.InClusterEnv).
// Each one's termination message is the node the API server has it on.
func TestRealNodePodReachesAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apicheck"}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}) })
	allowReadingPods(ctx, t, ns.Name)
	hostEnv, err := kubeletnode.InClusterEnv(cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		hostNetwork bool
		env         []v1.EnvVar
	}{
		{name: "pod-network"},
		{name: "host-network", hostNetwork: true, env: hostEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := nodes.Nodes[len(nodes.Nodes)-1].Name
			pod := apicheckPod(ns.Name, "apicheck-"+tc.name, node, tc.hostNetwork, tc.env)
			if _, err := cluster.Client.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := waitFinished(ctx, t, ns.Name, pod.Name)
			if got.Status.Phase != v1.PodSucceeded {
				t.Fatalf("pod %s: phase %s, want Succeeded; status: %s", pod.Name, got.Status.Phase, podStatus(got))
			}
			if msg, want := terminationMessage(got), "running on "+node; msg != want {
				t.Errorf("pod %s said %q, want %q", pod.Name, msg, want)
			}
		})
	}
}

// apicheckPod is a pod of the apicheck image bound to node, told its name
// and namespace by the downward API, with env before them.
func apicheckPod(namespace, name, node string, hostNetwork bool, env []v1.EnvVar) *v1.Pod {
	env = append(slices.Clone(env),
		v1.EnvVar{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		v1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1.PodSpec{
			NodeName:      node,
			HostNetwork:   hostNetwork,
			RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{
				Name:            "apicheck",
				Image:           nodes.Images.Ref(kubeletnode.APICheck),
				ImagePullPolicy: v1.PullNever,
				Env:             env,
			}},
		},
	}
}
