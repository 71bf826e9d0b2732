package e2erealnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// webClass is the quick start's class (deploy/kind/up.sh): delayed binding.
const webClass = "csi-zonal"

// webStatefulSet is the quick start's StatefulSet web (deploy/kind/up.sh:
// one replica per zone, scheduled by csi-topology-scheduler, a claim of
// csi-zonal each), with the lab's rwcheck instead of busybox: as the
// image's non-root user with fsGroup, an init container writes "written by
// <pod> <uid>" to the volume unless an earlier pod did (-keep), and reads
// it back (its termination message); the container then reads it too and
// stays.
func webStatefulSet(replicas int32, class, spreadKey string) *appsv1.StatefulSet {
	labels := map[string]string{"app": "web"}
	spec := v1.PodSpec{
		SchedulerName:                 "csi-topology-scheduler",
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		AutomountServiceAccountToken:  ptr.To(false),
		Affinity: &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: spreadKey,
			}},
		}},
		Containers: []v1.Container{nodes.ReadBackContainer("web", "data", "-stay")},
	}
	nodes.AddReadBack(&spec, "data")
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: "web", Replicas: ptr.To(replicas), PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: labels},
				Spec: v1.PersistentVolumeClaimSpec{
					AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					StorageClassName: ptr.To(class),
					Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
}

// webPod is what a pod of web showed: where it ran, which pod it was, what
// its init container read from the volume, and the claim's PV.
type webPod struct {
	node          string
	uid           types.UID
	read, written string
	pv            *v1.PersistentVolume
}

// TestRealNodeDeployStatefulSet installs deploy/'s mock overlay as a vendor
// does (kustomize, applied as is, the project's images and the mock
// driver's): csi-provisioner in the controller Deployment, the node
// DaemonSet, csi-topology-scheduler. The quick start's StatefulSet then
// gets one volume per zone, each PV's node affinity the zone of the node
// its pod runs on; each pod writes to its volume as a non-root user with
// fsGroup and reads the data back; a deleted pod comes back on the same
// node and reads the data of the one before. Our sidecars connect to the
// driver's sockets as root drivers make them, with no securityContext
// user of their own.
func TestRealNodeDeployStatefulSet(t *testing.T) {
	ctx := context.Background()
	r := installOverlay(ctx, t)
	sts := webStatefulSet(int32(len(realNodes)), webClass, zoneLabel)
	if _, err := cluster.Client.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWeb(ctx, t, sts) })
	first := waitWeb(ctx, t, sts, nil)
	checkPlacement(t, first, driver.TopologyPrefix+"zone", func(node string) string { return nodeZones[node] })
	old := first["web-0"]
	if err := cluster.Client.CoreV1().Pods(sts.Namespace).Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitWeb(ctx, t, sts, map[string]types.UID{"web-0": old.uid})["web-0"]
	if again.node != old.node {
		t.Errorf("web-0 came back on %s, want %s, where its volume is", again.node, old.node)
	}
	if again.read != old.read {
		t.Errorf("the new web-0 read %q from its volume, want the old pod's %q", again.read, old.read)
	}
	checkSidecarsAsShipped(ctx, t, r)
	checkCapacityOwner(ctx, t, webClass, "Deployment", "csi-controller")
}

// checkCapacityOwner checks that the capacity objects of class, one per
// segment with a node, are owned by the workload of kind and name (the
// controller Deployment, --capacity-owner-deployment), so that removing it
// removes them.
func checkCapacityOwner(ctx context.Context, t *testing.T, class, kind, name string) {
	t.Helper()
	list, err := cluster.Client.StorageV1().CSIStorageCapacities(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range list.Items {
		if c.StorageClassName != class {
			continue
		}
		n++
		if o := c.OwnerReferences; len(o) != 1 || o[0].Kind != kind || o[0].Name != name {
			t.Errorf("CSIStorageCapacity %s: owners %+v, want the %s %s", c.Name, o, kind, name)
		}
	}
	if n < len(realNodes) {
		t.Errorf("%d CSIStorageCapacity objects of class %s, want one per segment of the %d nodes", n, class, len(realNodes))
	}
}

// waitWeb waits until every pod of sts runs, ready, on a node, its init
// container done (a pod named in skip must have another UID: a new pod),
// and returns them by name. An init container that failed fails the test
// with what it said.
func waitWeb(ctx context.Context, t *testing.T, sts *appsv1.StatefulSet, skip map[string]types.UID) map[string]webPod {
	t.Helper()
	pods := map[string]webPod{}
	var last string
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		for i := range *sts.Spec.Replicas {
			name := fmt.Sprintf("%s-%d", sts.Name, i)
			p, err := cluster.Client.CoreV1().Pods(sts.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.UID == skip[name] {
				last = fmt.Sprintf("pod %s: not there yet (%v)", name, err)
				return false, nil
			}
			last = fmt.Sprintf("pod %s on %q: %s", name, p.Spec.NodeName, podStatus(p))
			read, done, err := kubeletnode.ReadBack(p)
			if err != nil {
				return false, err
			}
			if !done || p.Status.Phase != v1.PodRunning || !kubeletnode.PodReady(p) {
				return false, nil
			}
			claim, err := cluster.Client.CoreV1().PersistentVolumeClaims(sts.Namespace).Get(ctx, "data-"+name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pv, err := cluster.Client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pods[name] = webPod{node: p.Spec.NodeName, uid: p.UID, read: read, written: kubeletnode.WrittenBy(p), pv: pv}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the pods of %s never ran: %v; last: %s; install: %s", sts.Name, err, last, kubeletnode.NamespacePods(ctx, cluster, installNamespace))
	}
	return pods
}

// checkPlacement checks that each pod read what it wrote, and was placed
// by topology: one pod per segment, each PV's node affinity on key the
// segment of its pod's node (segmentOf).
func checkPlacement(t *testing.T, pods map[string]webPod, key string, segmentOf func(node string) string) {
	t.Helper()
	zones := map[string]string{}
	for name, p := range pods {
		if p.read != p.written {
			t.Errorf("pod %s read %q, want %q", name, p.read, p.written)
		}
		zone := segmentOf(p.node)
		if other, ok := zones[zone]; ok {
			t.Errorf("pods %s and %s both in zone %q", name, other, zone)
		}
		zones[zone] = name
		var got []string
		if a := p.pv.Spec.NodeAffinity; a != nil && a.Required != nil {
			for _, term := range a.Required.NodeSelectorTerms {
				for _, e := range term.MatchExpressions {
					if e.Key == key {
						got = append(got, e.Values...)
					}
				}
			}
		}
		if !slices.Equal(got, []string{zone}) {
			t.Errorf("pod %s runs on %s (zone %q), its PV %s has node affinity %s in %v", name, p.node, zone, p.pv.Name, key, got)
		}
	}
}

// checkSidecarsAsShipped checks what the sidecars met: csi-provisioner and
// csi-node-publisher run as shipped (no user in their securityContext), the
// node plugin's socket on each node is root's with mode 0755, as root
// drivers make it, and each node's publisher keeps its heartbeat Lease.
func checkSidecarsAsShipped(ctx context.Context, t *testing.T, in *kubeletnode.Install) {
	t.Helper()
	for _, c := range in.Containers() {
		if (c.Name == "csi-provisioner" || c.Name == "csi-node-publisher") && c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			t.Errorf("%s: deploy/ sets runAsUser %d; the image's user should do", c.Name, *c.SecurityContext.RunAsUser)
		}
	}
	for _, n := range nodes.Nodes {
		sock := n.HostPath(filepath.Join(kubeletnode.KubeletRoot, "plugins", driver.DefaultName, "csi.sock"))
		fi, err := os.Stat(sock)
		if err != nil {
			t.Errorf("node %s: %v", n.Name, err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("node %s: the driver's socket is uid %d mode %v, want a root driver's: uid 0, 0755", n.Name, st.Uid, fi.Mode().Perm())
		}
		name := heartbeat.LeaseName(driver.DefaultName, n.Name)
		if _, err := cluster.Client.CoordinationV1().Leases(installNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s: no heartbeat Lease of csi-node-publisher: %v", n.Name, err)
		}
	}
}

// removeWeb deletes the StatefulSet, its pods and claims, and waits until
// the provisioner has deleted their volumes.
func removeWeb(ctx context.Context, t *testing.T, sts *appsv1.StatefulSet) {
	fg := metav1.DeletePropagationForeground
	_ = cluster.Client.AppsV1().StatefulSets(sts.Namespace).Delete(ctx, sts.Name, metav1.DeleteOptions{PropagationPolicy: &fg})
	_ = cluster.Client.CoreV1().PersistentVolumeClaims(sts.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=web"})
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		pvs, err := cluster.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == sts.Namespace && pv.Spec.StorageClassName == *sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName {
				return false, nil
			}
		}
		_, err = cluster.Client.CoreV1().Pods(sts.Namespace).Get(ctx, sts.Name+"-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("web's pods or volumes are still there: %v", err)
	}
}
