package e2ebind

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestBindThroughControllerManagerKilledMidBurst kills
// kube-controller-manager in the middle of a burst of 30 claims (half of
// the CreateVolume calls take 3 s), once some are Bound and some not:
// csi-provisioner alone binds every claim the PV controller had already
// handed to it; 10 claims created meanwhile wait for the restarted
// kube-controller-manager, and then all 40 end Bound; the invariants hold,
// and deleting the claims honours every PV's reclaim policy.
func TestBindThroughControllerManagerKilledMidBurst(t *testing.T) {
	c := env.Cluster
	ctx, ns := lab.NewNamespace(t, c, "kcm")
	class := lab.NewClass(t, ctx, c, ns+"-now", lab.ClassOptions{Immediate: true})
	setFaults(t, ctx, faults.Rule{Method: "CreateVolume", Latency: faults.Duration(3 * time.Second), Every: 2})
	names := newClaims(t, ctx, c, ns, "early", class, 30)
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		return boundNow(t, ctx, c, ns) >= 5, nil
	}); err != nil {
		t.Fatalf("no 5 claims Bound: %v\n%s", err, lab.Describe(ctx, c, ns))
	}
	start := stopControllerManager(t, ctx, c)
	bound := boundNow(t, ctx, c, ns)
	if bound == len(names) {
		t.Fatalf("all %d claims were Bound before kube-controller-manager was killed: CreateVolume was not slow enough for the test", bound)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var handed []string
	for _, pvc := range claims.Items {
		if pvc.Annotations["volume.kubernetes.io/storage-provisioner"] == lab.DriverName {
			handed = append(handed, pvc.Name)
		}
	}
	t.Logf("kube-controller-manager killed with %d of %d claims Bound, %d handed to csi-provisioner", bound, len(names), len(handed))
	waitAllBound(t, ctx, c, ns, handed)
	late := newClaims(t, ctx, c, ns, "late", class, 10)
	start()
	waitAllBound(t, ctx, c, ns, append(names, late...))
	checkSettled(t, ctx, c, ns)
	deleteAndCheckReclaim(t, ctx, c, ns)
}

// TestBindThroughProvisionerKilledBetweenPVAndClaim kills csi-provisioner
// (SIGKILL) the moment the first PVs of a burst of 20 claims appear, with
// kube-controller-manager stopped so that only csi-provisioner binds and
// nothing writes while it is down: some bindings are left half done (a PV
// whose claim is not yet Bound to it; the test tries again, up to 10
// kills while claims wait for their PV, until one is). csi-provisioner, started again with
// kube-controller-manager still stopped, finishes every binding; then the
// invariants hold, and deleting the claims honours the reclaim policy.
func TestBindThroughProvisionerKilledBetweenPVAndClaim(t *testing.T) {
	c := env.Cluster
	ctx, ns := lab.NewNamespace(t, c, "kill")
	class := lab.NewClass(t, ctx, c, ns+"-now", lab.ClassOptions{Immediate: true})
	setFaults(t, ctx, faults.Rule{Method: "CreateVolume", Latency: faults.Duration(3 * time.Second)},
		faults.Rule{Method: "CreateVolume", Latency: faults.Duration(2 * time.Second), Every: 2})
	names := newClaims(t, ctx, c, ns, "c", class, 20)
	waitMarkedForProvisioner(t, ctx, c, ns, names)
	startKCM := stopControllerManager(t, ctx, c)
	t.Cleanup(func() {
		if p := env.Provisioner(); p == nil || p.Exited() {
			if err := env.StartProvisioner(); err != nil {
				t.Errorf("starting csi-provisioner again: %v", err)
			}
		}
	})
	if n := boundNow(t, ctx, c, ns); n > 0 {
		t.Fatalf("%d claims were Bound before kube-controller-manager was stopped: CreateVolume was not slow enough for the test", n)
	}
	var half []string
	noPV := names
	for kill := 1; kill <= 10 && len(half) == 0 && len(noPV) > 0; kill++ {
		killOnNextPV(t, ctx, ns)
		half, noPV = halfBound(t, ctx, c, ns)
		t.Logf("kill %d: %d bindings half done %v, %d claims without a PV", kill, len(half), half, len(noPV))
		if err := env.StartProvisioner(); err != nil {
			t.Fatal(err)
		}
	}
	if len(half) == 0 {
		t.Fatalf("no binding was half done at any kill: the test proves nothing")
	}
	t0 := time.Now()
	waitAllBound(t, ctx, c, ns, names)
	t.Logf("all %d claims Bound %s after the last restart, by csi-provisioner alone", len(names), since(t0))
	checkSettled(t, ctx, c, ns)
	startKCM()
	deleteAndCheckReclaim(t, ctx, c, ns)
}

// killOnNextPV kills csi-provisioner (SIGKILL) as soon as the next PV of a
// claim of ns is created, and returns once it is dead.
func killOnNextPV(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	p := env.Provisioner()
	var once sync.Once
	killed := make(chan struct{})
	stop := watchPVs(t, ctx, env.Cluster, ns, func(*v1.PersistentVolume) {
		once.Do(func() { p.Kill(); close(killed) })
	})
	defer stop()
	select {
	case <-killed:
	case <-time.After(lab.WorkloadTimeout):
		t.Fatalf("no PV of %s created within %s\n%s", ns, lab.WorkloadTimeout, lab.Describe(ctx, env.Cluster, ns))
	}
}
