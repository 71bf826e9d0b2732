package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// kubeletWorkers are the real nodes of `make run NODES=kubelet`: the kind
// quick start's workers, one per zone, as deploy/'s mock overlay knows them.
var kubeletWorkers = map[string]string{"csi-topology-worker": "z1", "csi-topology-worker2": "z2", "csi-topology-worker3": "z3"}

// runOnKubelets is the main job on real nodes: the control plane with three
// kubelets, deploy/'s mock overlay installed as a vendor installs it (the
// project's images, as pods), then examples/, whose StatefulSet's pods
// really start: each writes to its volume and reads it back first.
func runOnKubelets(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	fmt.Println("Starting the local control plane and 3 real nodes (kubelet, containerd; needs root; the first run builds them: a few minutes)...")
	cluster, err := controlplane.Start(ctx, controlplane.Options{Controllers: kubeletnode.InstallControllers})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the control plane...")
		if err := cluster.Stop(); err != nil {
			logger.Error(err, "Stopping the control plane")
		}
	}()
	fail := func(err error) error {
		if ctx.Err() == nil {
			cluster.DumpLogs(os.Stderr, 20)
		}
		return err
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range kubeletWorkers {
			if !yield(n) {
				return
			}
		}
	})
	nodes, err := kubeletnode.AddNodes(ctx, cluster, kubeletnode.Options{Names: names}, kubeletnode.MockOverlayImages...)
	if err != nil {
		return fail(err)
	}
	// Before the plane's Stop: kubelets first, then their pods.
	defer func() {
		fmt.Println("Stopping the real nodes...")
		if err := nodes.Stop(); err != nil {
			logger.Error(err, "Stopping the real nodes")
		}
	}()
	fmt.Printf("Real nodes Ready: %v. Installing %s...\n", names, kubeletnode.MockOverlay)
	in, err := kubeletnode.RenderInstall(cluster.RepoRoot, kubeletnode.MockOverlay)
	if err != nil {
		return fail(err)
	}
	if err := nodes.Install(ctx, cluster, in, kubeletWorkers, 10*time.Minute); err != nil {
		return fail(err)
	}
	if err := applyExamplesOnKubelets(ctx, cluster, nodes); err != nil {
		return fail(err)
	}
	rows, err := waitBound(ctx, cluster, kubeletWorkers, o.timeout)
	if err != nil {
		return fail(err)
	}
	if err := waitReadBack(ctx, cluster, rows, o.timeout); err != nil {
		return fail(err)
	}
	printTable(os.Stdout, rows)
	return stayUp(ctx, cluster, o)
}

// applyExamplesOnKubelets applies examples/: the class as it is, the
// StatefulSet with the lab's read-back init container (kubeletnode
// AddReadBack), and gives the lab's pause image, on every node, the name
// of the StatefulSet's image (no registry here).
func applyExamplesOnKubelets(ctx context.Context, cluster *controlplane.Cluster, nodes *kubeletnode.Nodes) error {
	examples := filepath.Join(cluster.RepoRoot, "examples")
	if err := cluster.ApplyFile(ctx, filepath.Join(examples, "storageclass.yaml"), false); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(examples, "statefulset.yaml"))
	if err != nil {
		return err
	}
	sts := &appsv1.StatefulSet{}
	if err := yaml.UnmarshalStrict(data, sts); err != nil {
		return fmt.Errorf("examples/statefulset.yaml: %w", err)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if err := nodes.TagImage(ctx, nodes.Images.Ref(kubeletnode.Pause), c.Image); err != nil {
			return err
		}
	}
	nodes.AddReadBack(&sts.Spec.Template.Spec, sts.Spec.VolumeClaimTemplates[0].Name)
	if _, err := cluster.Client.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the StatefulSet %s: %w", sts.Name, err)
	}
	fmt.Println("Applied examples/: StorageClass mock-zonal and StatefulSet web (3 replicas, one per zone), each pod writing to its volume and reading it back.")
	return nil
}

// waitReadBack waits until the pod of every row runs and its read-back
// container has read its volume, and fills the rows' readBack.
func waitReadBack(ctx context.Context, cluster *controlplane.Cluster, rows []row, timeout time.Duration) error {
	var last string
	err := cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		for i := range rows {
			pod, err := cluster.Client.CoreV1().Pods("default").Get(ctx, rows[i].pod, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			read, done, err := kubeletnode.ReadBack(pod)
			if err != nil || !done {
				last = fmt.Sprintf("pod %s: phase %s", pod.Name, pod.Status.Phase)
				return false, err
			}
			rows[i].readBack = read
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the StatefulSet's pods to read their volumes: %w (last: %s)", err, last)
	}
	return nil
}

// stayUp prints how to reach the cluster and, without --once, waits for
// the end of ctx.
func stayUp(ctx context.Context, cluster *controlplane.Cluster, o options) error {
	fmt.Printf("\nKUBECONFIG=%s\n", cluster.Kubeconfig)
	fmt.Printf("Try: kubectl --kubeconfig %s get pvc,pv -o wide\n", cluster.Kubeconfig)
	fmt.Printf("Logs of every component: %s\n", cluster.LogDir)
	if o.once {
		return nil
	}
	fmt.Println("\nThe cluster stays up; press Ctrl-C to stop and clean up.")
	<-ctx.Done()
	return nil
}
