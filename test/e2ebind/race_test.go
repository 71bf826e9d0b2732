package e2ebind

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestBindThroughRacesThePVController provisions a burst of immediate
// claims with kube-controller-manager running, so that csi-provisioner and
// the PV controller race to bind each pair: whoever wins each write, every
// claim ends Bound to its own PV, which names it; none is Lost. Deleting
// the claims then deletes their PVs and volumes (reclaim policy Delete),
// and a Retain class's PV stays Released.
func TestBindThroughRacesThePVController(t *testing.T) {
	c := env.Cluster
	ctx, ns := lab.NewNamespace(t, c, "race")
	del := lab.NewClass(t, ctx, c, ns+"-delete", lab.ClassOptions{Immediate: true})
	retain := lab.NewClass(t, ctx, c, ns+"-retain", lab.ClassOptions{Immediate: true, Reclaim: v1.PersistentVolumeReclaimRetain})
	const n = 12
	for i := range n {
		class := del
		if i%4 == 3 {
			class = retain
		}
		lab.NewClaim(t, ctx, c, ns, fmt.Sprintf("c-%d", i), class, gi)
	}
	pvs := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("c-%d", i)
		pv := lab.WaitBound(t, ctx, c, ns, name)
		if other, ok := pvs[pv.Name]; ok {
			t.Errorf("PV %s bound to claims %s and %s", pv.Name, other, name)
		}
		pvs[pv.Name] = name
	}
	checkBindings(t, ctx, c, ns)
	if err := c.Client.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for pvName, claim := range pvs {
		retained := claim == "c-3" || claim == "c-7" || claim == "c-11"
		if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
			pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
			if retained {
				return err == nil && pv.Status.Phase == v1.VolumeReleased, nil
			}
			return err != nil, nil
		}); err != nil {
			t.Errorf("PV %s of claim %s (retain %v): reclaim policy not honoured: %v", pvName, claim, retained, err)
		}
		if retained {
			_ = c.Client.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{})
		}
	}
}

// checkBindings checks the binding invariants of the claims of ns: each
// Bound claim's PV exists, names it (UID included) and is Bound; no two
// claims share a PV; no claim is named by two PVs; no claim is Lost.
func checkBindings(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) {
	t.Helper()
	waitNoneLost(t, ctx, c, ns)
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	naming := map[string][]string{}
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns {
			naming[string(ref.UID)] = append(naming[string(ref.UID)], pv.Name)
		}
	}
	for uid, names := range naming {
		if len(names) > 1 {
			t.Errorf("claim UID %s is named by %d PVs: %v", uid, len(names), names)
		}
	}
	seen := map[string]string{}
	for _, pvc := range claims.Items {
		if pvc.Status.Phase == v1.ClaimLost {
			t.Errorf("claim %s is Lost", pvc.Name)
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		if other, ok := seen[pvc.Spec.VolumeName]; ok {
			t.Errorf("claims %s and %s are bound to the same PV %s", other, pvc.Name, pvc.Spec.VolumeName)
		}
		seen[pvc.Spec.VolumeName] = pvc.Name
		pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("claim %s: its PV %s: %v", pvc.Name, pvc.Spec.VolumeName, err)
			continue
		}
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID || pv.Status.Phase != v1.VolumeBound {
			t.Errorf("claim %s: PV %s names %+v and is %s, want this claim and Bound", pvc.Name, pv.Name, pv.Spec.ClaimRef, pv.Status.Phase)
		}
	}
}

// waitNoneLost waits until no claim of ns is Lost. A claim bound through can
// be Lost for a while: kube-controller-manager's PV controller adds a PV to
// its own cache only when its single volume worker gets to it, and a claim
// bound to a PV not in that cache is marked Lost ("Bound claim has lost its
// PersistentVolume") until the PV controller's next sync of the claim finds
// the PV and binds it again (docs/configuration.md, "Bind-through", known
// hazard). The transient cases are logged; a claim still Lost after
// lab.WorkloadTimeout fails the check that follows.
func waitNoneLost(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) {
	t.Helper()
	seen := map[string]bool{}
	_ = c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		lost := false
		for _, pvc := range claims.Items {
			if pvc.Status.Phase == v1.ClaimLost {
				seen[pvc.Name], lost = true, true
			}
		}
		return !lost, nil
	})
	if len(seen) > 0 {
		t.Logf("claims Lost for a while, the PV controller's race (known hazard of bind-through): %v", seen)
	}
}
