package main

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// zonesFor returns the zones of a cluster of size nodes: one per node up to
// 3 nodes, 10 above.
func zonesFor(size int) []string {
	n := 10
	if size <= 3 {
		n = size
	}
	zones := make([]string, n)
	for i := range zones {
		zones[i] = fmt.Sprintf("z%d", i+1)
	}
	return zones
}

// fakeNode is a Ready node as a kubelet would report it, with the status a
// real node carries (conditions, addresses, capacity, node info, cached
// images): a benchmark of what the provisioner caches and decodes needs
// objects of a realistic size (about 6 KB in JSON, managedFields included).
func fakeNode(name, zone string, i int) *v1.Node {
	res := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("32"), v1.ResourceMemory: resource.MustParse("128Gi"),
		v1.ResourcePods: resource.MustParse("1000"), v1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	now := metav1.Now()
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	var images []v1.ContainerImage
	for j := 0; j < 12; j++ {
		repo := fmt.Sprintf("registry.example.com/team-%d/service-%d", j%4, j)
		images = append(images, v1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, j+1), repo + ":v1.2." + fmt.Sprint(j)},
			SizeBytes: int64(20+j*7) << 20,
		})
	}
	ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m5.8xlarge", "topology.kubernetes.io/region": "region-1",
			"topology.kubernetes.io/zone": "region-1" + zone, lab.ZoneKey: zone,
		}, Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		}},
		Spec: v1.NodeSpec{PodCIDR: fmt.Sprintf("10.200.%d.0/24", i&255), ProviderID: "fake://" + name},
		Status: v1.NodeStatus{
			Capacity: res, Allocatable: res, Phase: "",
			Conditions: []v1.NodeCondition{
				cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}, {Type: v1.NodeHostName, Address: name}},
			DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}},
			NodeInfo: v1.NodeSystemInfo{
				MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%05d-0000-0000-0000-000000000000", i),
				BootID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), KernelVersion: "6.1.0-18-amd64",
				OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.13",
				KubeletVersion: "v1.36.3", KubeProxyVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64",
			},
			Images: images,
		},
	}
}

// createNodes creates size Ready nodes over zones (round robin), each with
// the CSINode entry csi-node-publisher would publish for the mock driver,
// with workers requests in flight. It returns node name -> zone.
func createNodes(ctx context.Context, client kubernetes.Interface, size int, zones []string, workers int) (map[string]string, error) {
	nodes := make(map[string]string, size)
	names := make([]string, size)
	for i := range names {
		names[i] = fmt.Sprintf("bench-node-%05d", i)
		nodes[names[i]] = zones[i%len(zones)]
	}
	return nodes, parallel(ctx, size, workers, func(ctx context.Context, i int) error {
		return createNode(ctx, client, fakeNode(names[i], nodes[names[i]], i))
	})
}

// createNode creates a node as Ready (admission taints every new node
// not-ready; a kubelet and the node lifecycle controller would lift it) and
// its CSINode.
func createNode(ctx context.Context, client kubernetes.Interface, node *v1.Node) error {
	status := node.Status
	n, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", node.Name, err)
	}
	if len(n.Status.Conditions) == 0 {
		n.Status = status
		if n, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", node.Name, err)
		}
	}
	if len(n.Spec.Taints) > 0 {
		n.Spec.Taints = nil
		if _, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("untainting node %s: %w", node.Name, err)
		}
	}
	_, err = client.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: lab.DriverName, NodeID: node.Name, TopologyKeys: []string{lab.ZoneKey}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating CSINode %s: %w", node.Name, err)
	}
	return nil
}

// parallel runs fn(0..n-1) with workers calls at once and returns the first
// error (the remaining calls are skipped).
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
