package main

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
)

// The owner of a node instance's capacity objects is its Node unless a
// flag names another, also when the DaemonSet sets POD_NAME and NAMESPACE
// (deploy/'s does, for upstream's image): upstream's default level would
// make the DaemonSet the owner, and a node's objects would then outlive it.
func TestCapacityOwnerOfNodeInstance(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "csi-controller", Namespace: "csi-topology", UID: "dep-uid"}}
	base := config{enableCapacity: true, podName: "csi-node-abcde", podNamespace: "csi-topology", capacityOwnerLevel: 1}
	base.capacity.Namespace = "csi-topology"
	base.node.NodeName = "node-1"
	with := func(f func(*config)) config { c := base; f(&c); return c }
	tests := []struct {
		name            string
		cfg             config
		wantKind, wantU string
	}{
		{name: "node deployment with the DaemonSet's POD_NAME", cfg: with(func(c *config) { c.nodeDeployment = true }),
			wantKind: "Node", wantU: "node-uid"},
		{name: "node deployment without POD_NAME", cfg: with(func(c *config) { c.nodeDeployment, c.podName = true, "" }),
			wantKind: "Node", wantU: "node-uid"},
		{name: "node deployment, owner Deployment named", cfg: with(func(c *config) { c.nodeDeployment, c.capacityOwner = true, dep.Name }),
			wantKind: "Deployment", wantU: "dep-uid"},
		{name: "central, owner Deployment named", cfg: with(func(c *config) { c.capacityOwner = dep.Name }),
			wantKind: "Deployment", wantU: "dep-uid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node, dep)
			// No API server there: an owner lookup from the pod fails.
			nowhere := &rest.Config{Host: "http://127.0.0.1:1"}
			got, err := capacityConfig(context.Background(), tc.cfg, driverconn.DriverInfo{Name: "csi.example.com", SupportsCapacity: true}, client, nowhere)
			if err != nil {
				t.Fatalf("capacityConfig: %v", err)
			}
			if got.Owner == nil || got.Owner.Kind != tc.wantKind || string(got.Owner.UID) != tc.wantU {
				t.Errorf("owner %+v, want %s %s", got.Owner, tc.wantKind, tc.wantU)
			}
		})
	}
}
