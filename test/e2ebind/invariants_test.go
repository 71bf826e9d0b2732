package e2ebind

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// recordFinalizer is the in-flight record on a claim (docs/operations.md).
const recordFinalizer = "provisioner.storage.kubernetes.io/volume-leak-protection"

// setFaults sets the mock driver's fault rules until the test ends.
func setFaults(t *testing.T, ctx context.Context, rules ...faults.Rule) {
	t.Helper()
	if err := env.SetFaults(ctx, rules); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
}

// stopControllerManager kills kube-controller-manager and returns the
// function that starts it again (once; also at cleanup when the test did
// not).
func stopControllerManager(t *testing.T, ctx context.Context, c *controlplane.Cluster) func() {
	t.Helper()
	c.StopControllerManager()
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		if err := c.StartControllerManager(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("restarting kube-controller-manager: %v", err)
		}
	}
	t.Cleanup(start)
	return start
}

// newClaims creates claims prefix-0 ... prefix-(n-1) of class and returns
// their names.
func newClaims(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns, prefix, class string, n int) []string {
	t.Helper()
	names := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		lab.NewClaim(t, ctx, c, ns, name, class, gi)
		names = append(names, name)
	}
	return names
}

// waitAllBound waits until every claim named is Bound.
func waitAllBound(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string, names []string) {
	t.Helper()
	for _, name := range names {
		lab.WaitBound(t, ctx, c, ns, name)
	}
}

// watchPVs calls added for every PV of a claim of ns that is created from
// now on, in its own goroutine, until the returned function is called.
func watchPVs(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string, added func(*v1.PersistentVolume)) func() {
	t.Helper()
	// From the list's version: a watch without one starts with an ADDED
	// event for every PV that exists.
	list, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Client.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pv, ok := ev.Object.(*v1.PersistentVolume)
			if ev.Type == watch.Added && ok && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				added(pv)
			}
		}
	}()
	stop := func() { w.Stop(); <-done }
	t.Cleanup(stop)
	return stop
}

// halfBound lists, with kube-controller-manager and csi-provisioner down (so
// that nothing writes), the PVs of ns whose claim is not yet Bound to them
// (a binding left half done), and the claims of ns without a PV.
func halfBound(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) (half, noPV []string) {
	t.Helper()
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[string]*v1.PersistentVolume{}
	for i := range pvs.Items {
		if ref := pvs.Items[i].Spec.ClaimRef; ref != nil && ref.Namespace == ns {
			byUID[string(ref.UID)] = &pvs.Items[i]
		}
	}
	for _, pvc := range claims.Items {
		pv := byUID[string(pvc.UID)]
		switch {
		case pv == nil:
			noPV = append(noPV, pvc.Name)
		case pv.Status.Phase != v1.VolumeBound || pvc.Spec.VolumeName != pv.Name || pvc.Status.Phase != v1.ClaimBound:
			half = append(half, fmt.Sprintf("%s (PV %s, volumeName %q, claim %s)", pvc.Name, pv.Status.Phase, pvc.Spec.VolumeName, pvc.Status.Phase))
		}
	}
	return half, noPV
}

// checkSettled checks the binding invariants (checkBindings), that no claim
// of ns is Terminating nor keeps the in-flight record once Bound (waiting
// for the record's removal, which follows the PV), and that the driver's
// volumes of ns's claims and their PVs match one to one.
func checkSettled(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) {
	t.Helper()
	checkBindings(t, ctx, c, ns)
	var kept []string
	err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		kept = kept[:0]
		for _, pvc := range claims.Items {
			if pvc.DeletionTimestamp != nil {
				kept = append(kept, pvc.Name+" Terminating, finalizers "+strings.Join(pvc.Finalizers, ","))
			} else if pvc.Status.Phase == v1.ClaimBound && hasRecord(&pvc) {
				kept = append(kept, pvc.Name+" Bound with the in-flight record")
			}
		}
		return len(kept) == 0, nil
	})
	if err != nil {
		t.Errorf("claims of %s not settled: %v", ns, kept)
	}
	vols, pvs := volumesAndPVs(t, ctx, c, ns)
	for name := range vols {
		if !pvs[name] {
			t.Errorf("LEAK: driver volume %s has no PV", name)
		}
	}
	for name := range pvs {
		if !vols[name] {
			t.Errorf("PV of volume %s, which the driver does not have", name)
		}
	}
}

func hasRecord(pvc *v1.PersistentVolumeClaim) bool {
	for _, f := range pvc.Finalizers {
		if f == recordFinalizer {
			return true
		}
	}
	return false
}

// volumesAndPVs returns the driver's volumes named after a claim of ns
// (the names pvc-<claim UID> of every claim the PVs or the claims of ns
// name) and the volume handles of the PVs of ns's claims.
func volumesAndPVs(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) (vols, pvs map[string]bool) {
	t.Helper()
	list, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, pvc := range claims.Items {
		names[lab.VolumeName(&pvc)] = true
	}
	pvs = map[string]bool{}
	for _, pv := range list.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns && pv.Spec.CSI != nil {
			pvs[pv.Spec.CSI.VolumeHandle] = true
			names["pvc-"+string(pv.Spec.ClaimRef.UID)] = true
		}
	}
	driverVols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vols = map[string]bool{}
	for _, v := range driverVols {
		if names[v.Name] {
			vols[v.ID] = true
		}
	}
	return vols, pvs
}

// deleteAndCheckReclaim deletes every claim of ns and checks the reclaim
// policy of their PVs (Delete: the PV and its volume go; Retain: the PV
// stays Released, and is deleted here) and that no claim stays.
func deleteAndCheckReclaim(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) {
	t.Helper()
	list, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pvs []v1.PersistentVolume
	for _, pv := range list.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			pvs = append(pvs, pv)
		}
	}
	if err := c.Client.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, nil
	}); err != nil {
		t.Errorf("claims of %s not gone after their deletion: %v\n%s", ns, err, lab.Describe(ctx, c, ns))
	}
	for _, pv := range pvs {
		retain := pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimRetain
		if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
			got, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if retain {
				return err == nil && got.Status.Phase == v1.VolumeReleased, nil
			}
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("PV %s of claim %s (reclaim %s): policy not honoured: %v", pv.Name, pv.Spec.ClaimRef.Name, pv.Spec.PersistentVolumeReclaimPolicy, err)
		}
		if retain {
			_ = c.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
		}
	}
	waitVolumesGone(t, ctx, pvs)
}

// waitVolumesGone waits until the driver has none of the volumes of pvs
// whose reclaim policy is Delete.
func waitVolumesGone(t *testing.T, ctx context.Context, pvs []v1.PersistentVolume) {
	t.Helper()
	want := map[string]string{}
	for _, pv := range pvs {
		if pv.Spec.CSI != nil && pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete {
			want[pv.Spec.CSI.VolumeHandle] = pv.Name
		}
	}
	var left []string
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		vols, err := env.Volumes(ctx)
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, v := range vols {
			if pv, ok := want[v.ID]; ok {
				left = append(left, v.ID+" (PV "+pv+")")
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Errorf("volumes of deleted PVs still in the driver after %s: %v", lab.WorkloadTimeout, left)
	}
}

// since is a short duration for logs.
func since(t0 time.Time) time.Duration { return time.Since(t0).Round(100 * time.Millisecond) }
