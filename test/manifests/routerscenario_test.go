package manifests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// Annotations the scheduler and kube-controller-manager's PV controller put
// on a claim of an external provisioner.
const (
	annSelectedNode        = "volume.kubernetes.io/selected-node"
	annStorageProvisioner  = "volume.kubernetes.io/storage-provisioner"
	routerScenarioPrefix   = "x-routerrbac-"
	nodeNotKnown           = "NodeNotKnown"
	routerLeaseNamePrefix  = "csi-node-router-"
	routerScenarioCapacity = "1Gi"
)

// runRouterScenario has the running csi-node-router of driver go through
// each of its paths, as the cluster's admin creates what it acts on, and
// waits for each outcome: the node's label on a WaitForFirstConsumer claim
// the scheduler placed, the pool's on an unselected Immediate claim, the
// node's on a PV of that node (hostname affinity), and a NodeNotKnown Event
// on a PV without node affinity, posted (create), then posted again
// (patch: the recorder counts a repeat) after an instance's label came and
// went. Everything is deleted at the end, the router's Lease too.
func runRouterScenario(t *testing.T, ctx context.Context, driver, metricsURL string) {
	t.Helper()
	c := cluster.Client
	ns := routerScenarioPrefix + utilrand.String(5)
	node := ns + "-node"
	cleanupRouterScenario(t, c, ns, node)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.CreateNode(ctx, node, nil, nil); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]storagev1.VolumeBindingMode{
		ns + "-wffc": storagev1.VolumeBindingWaitForFirstConsumer, ns + "-imm": storagev1.VolumeBindingImmediate,
	} {
		if _, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Provisioner: driver, VolumeBindingMode: &mode}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createScenarioClaim(t, ctx, ns, "placed", ns+"-wffc", map[string]string{annSelectedNode: node, annStorageProvisioner: driver})
	createScenarioClaim(t, ctx, ns, "pooled", ns+"-imm", map[string]string{annStorageProvisioner: driver})
	createScenarioPV(t, ctx, ns+"-local", driver, &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}})
	everywhere := ns + "-everywhere"
	createScenarioPV(t, ctx, everywhere, driver, nil)

	waitUntil(t, ctx, "claim placed labelled with its node", claimLabelled(c, ns, "placed", nodelabel.NodeValue(node)))
	waitUntil(t, ctx, "claim pooled labelled with the pool", claimLabelled(c, ns, "pooled", nodelabel.PoolValue(driver)))
	waitUntil(t, ctx, "PV of the node labelled", func(ctx context.Context) (bool, error) {
		pv, err := c.CoreV1().PersistentVolumes().Get(ctx, ns+"-local", metav1.GetOptions{})
		return err == nil && pv.Labels[nodelabel.Key] == nodelabel.NodeValue(node), nil
	})
	waitUntil(t, ctx, "NodeNotKnown Event on the PV without node affinity", nodeNotKnownCount(c, everywhere, 1))
	// An instance labels the PV (the router forgets it), then the label is
	// stripped: the router posts the same Event again.
	setPVLabel(t, ctx, everywhere, nodelabel.NodeValue(node))
	waitUntil(t, ctx, "router forgets the labelled PV", func(ctx context.Context) (bool, error) {
		_, body := httpGet(ctx, metricsURL)
		return noneUnplaced.MatchString(body), nil
	})
	setPVLabel(t, ctx, everywhere, "")
	waitUntil(t, ctx, "NodeNotKnown Event posted again (count 2)", nodeNotKnownCount(c, everywhere, 2))
}

// cleanupRouterScenario deletes, at the end of the test, what
// runRouterScenario creates, and the router's Lease and Events: a next run
// starts from nothing.
func cleanupRouterScenario(t *testing.T, c kubernetes.Interface, ns, node string) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		for _, name := range []string{ns + "-wffc", ns + "-imm"} {
			_ = c.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range []string{ns + "-local", ns + "-everywhere"} {
			_ = c.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
		}
		_ = c.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "reason=" + nodeNotKnown})
		if leases, err := c.CoordinationV1().Leases(routerNamespace()).List(ctx, metav1.ListOptions{}); err == nil {
			for _, l := range leases.Items {
				if strings.HasPrefix(l.Name, routerLeaseNamePrefix) {
					_ = c.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
				}
			}
		}
	})
}

// routerNamespace is the namespace of routerUser's ServiceAccount.
func routerNamespace() string {
	return strings.Split(strings.TrimPrefix(routerUser, "system:serviceaccount:"), ":")[0]
}

func createScenarioClaim(t *testing.T, ctx context.Context, ns, name, class string, annotations map[string]string) {
	t.Helper()
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(routerScenarioCapacity)}}},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createScenarioPV creates a PV of driver with affinity, of a class no
// claim names (it stays Available).
func createScenarioPV(t *testing.T, ctx context.Context, name, driver string, affinity *v1.VolumeNodeAffinity) {
	t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse(routerScenarioCapacity)},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              name + "-none",
			PersistentVolumeSource:        v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name}},
			NodeAffinity:                  affinity,
		},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setPVLabel sets the node label of a PV as the admin, or removes it ("").
func setPVLabel(t *testing.T, ctx context.Context, name, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, nodelabel.Key, v)
	if _, err := cluster.Client.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func claimLabelled(c kubernetes.Interface, ns, name, value string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		claim, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && claim.Labels[nodelabel.Key] == value, nil
	}
}

// nodeNotKnownCount holds once the NodeNotKnown Event on PV name has been
// posted count times (one Event, counted by the recorder).
func nodeNotKnownCount(c kubernetes.Interface, name string, count int32) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		events, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=" + nodeNotKnown})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.Count >= count {
				return true, nil
			}
		}
		return false, nil
	}
}
