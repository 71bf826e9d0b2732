package e2ebind

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestBindThroughClaimDeletedInFlight deletes claims while their binding is
// in flight: CreateVolume takes 2 s; a quarter of the claims are deleted
// while their CreateVolume runs, a quarter the moment their PV appears
// (racing csi-provisioner's binding writes, which start on the same
// event; these are created again under the same name once gone, as a
// StatefulSet does), a quarter (Retain class) likewise, and the rest are
// kept. Kept and re-created claims end Bound to their own PV; deleted claims go (none stuck
// Terminating), their PVs go with reclaim Delete (and their volumes from
// the driver) or stay Released with Retain; no claim is bound to two PVs,
// no PV to two claims, none Lost, no volume leaks.
func TestBindThroughClaimDeletedInFlight(t *testing.T) {
	c := env.Cluster
	ctx, ns := lab.NewNamespace(t, c, "gone")
	del := lab.NewClass(t, ctx, c, ns+"-delete", lab.ClassOptions{Immediate: true})
	retain := lab.NewClass(t, ctx, c, ns+"-retain", lab.ClassOptions{Immediate: true, Reclaim: v1.PersistentVolumeReclaimRetain})
	setFaults(t, ctx, faults.Rule{Method: "CreateVolume", Latency: faults.Duration(2 * time.Second)})
	const n = 16
	d := &deleter{t: t, ctx: ctx, c: c, ns: ns, class: del}
	stop := watchPVs(t, ctx, c, ns, d.onPV)
	var kept, inFlight []string
	doomed := map[string]bool{} // volumes of claims of the Delete class
	for i := range n {
		name := fmt.Sprintf("c-%d", i)
		class := del
		if i%4 == 2 {
			class = retain
		}
		pvc := lab.NewClaim(t, ctx, c, ns, name, class, gi)
		if class == del {
			doomed[lab.VolumeName(pvc)] = true
		}
		switch {
		case i%4 == 0:
			inFlight = append(inFlight, lab.VolumeName(pvc))
		case i%4 == 3:
			kept = append(kept, name)
		}
	}
	// Delete the first quarter once the driver is making their volumes.
	waitCreateVolume(t, ctx, inFlight)
	for i := 0; i < n; i += 4 {
		if err := c.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, fmt.Sprintf("c-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ctx, c, ns, kept)
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		return len(d.deleted()) == n/2, nil
	}); err != nil {
		t.Fatalf("deleted claims %v as their PVs appeared, want %d: %v", d.deleted(), n/2, err)
	}
	stop()
	d.wg.Wait()
	recreated := d.recreated
	waitAllBound(t, ctx, c, ns, recreated)
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == len(kept)+len(recreated), nil
	}); err != nil {
		t.Errorf("deleted claims not gone: %v\n%s", err, lab.Describe(ctx, c, ns))
	}
	checkSettled(t, ctx, c, ns)
	deleteAndCheckReclaim(t, ctx, c, ns)
	waitNoVolume(t, ctx, doomed)
}

// deleter deletes claims c-<i> with i%4 == 1 or 2 of ns the moment their
// first PV appears, and creates those with i%4 == 1 again (of class) once
// they are gone.
type deleter struct {
	t     *testing.T
	ctx   context.Context
	c     *controlplane.Cluster
	ns    string
	class string
	wg    sync.WaitGroup

	mu        sync.Mutex
	gone      []string
	recreated []string
}

func (d *deleter) deleted() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.gone)
}

func (d *deleter) onPV(pv *v1.PersistentVolume) {
	name := pv.Spec.ClaimRef.Name
	i, err := strconv.Atoi(strings.TrimPrefix(name, "c-"))
	if err != nil || (i%4 != 1 && i%4 != 2) || slices.Contains(d.deleted(), name) {
		return
	}
	uid := pv.Spec.ClaimRef.UID
	if err := d.c.Client.CoreV1().PersistentVolumeClaims(d.ns).Delete(d.ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		d.t.Errorf("deleting claim %s as its PV %s appeared: %v", name, pv.Name, err)
	}
	d.mu.Lock()
	d.gone = append(d.gone, name)
	d.mu.Unlock()
	if i%4 == 1 {
		d.wg.Go(func() {
			if recreate(d.t, d.ctx, d.c, d.ns, name, d.class) {
				d.mu.Lock()
				d.recreated = append(d.recreated, name)
				d.mu.Unlock()
			}
		})
	}
}

// recreate creates claim name of class again once the deleted one is gone,
// as a StatefulSet does: the new claim must get a PV of its own, never the
// old claim's. It runs in its own goroutine: it reports errors without
// ending the test, and returns whether it created the claim.
func recreate(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns, name, class string) bool {
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("deleted claim %s not gone: %v", name, err)
		return false
	}
	pvc := lab.NewClaim(nonFatal{t}, ctx, c, ns, name, class, gi)
	return pvc != nil && pvc.UID != ""
}

// nonFatal is a testing.TB whose Fatal only reports, for goroutines other
// than the test's.
type nonFatal struct{ testing.TB }

func (n nonFatal) Fatal(args ...any) { n.Error(args...) }

// waitCreateVolume waits until the driver has received a CreateVolume for
// each volume name.
func waitCreateVolume(t *testing.T, ctx context.Context, names []string) {
	t.Helper()
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		calls, err := env.CreateRequests(ctx)
		if err != nil {
			return false, nil
		}
		seen := map[string]bool{}
		for _, r := range calls {
			seen[r.Name] = true
		}
		for _, n := range names {
			if !seen[n] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the driver never received CreateVolume for %v: %v", names, err)
	}
}

// waitNoVolume waits until the driver has no volume of one of names.
func waitNoVolume(t *testing.T, ctx context.Context, names map[string]bool) {
	t.Helper()
	var left []string
	if err := env.Cluster.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		vols, err := env.Volumes(ctx)
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, v := range vols {
			if names[v.Name] {
				left = append(left, v.Name)
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Errorf("LEAK: volumes of deleted claims stay in the driver: %v", left)
	}
}
