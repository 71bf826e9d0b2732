package e2epublisher

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const hostnameKey = "kubernetes.io/hostname"

// leaseLiveness is a Liveness over a Lease informer wired as the
// scheduler side wires it (LeaseListOptions, AddLeaseIndexer), until the
// test ends.
func leaseLiveness(t *testing.T, ctx context.Context) *heartbeat.Liveness {
	t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(heartbeat.LeaseListOptions))
	inf := factory.Coordination().V1().Leases().Informer()
	if err := heartbeat.AddLeaseIndexer(inf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	lv, err := heartbeat.NewLiveness(inf.GetIndexer())
	if err != nil {
		t.Fatal(err)
	}
	return lv
}

// waitLive waits until lv says the driver on node is live (or not) and
// known, and returns how long it has been silent.
func waitLive(t *testing.T, ctx context.Context, lv *heartbeat.Liveness, node string, want bool) time.Duration {
	t.Helper()
	var live, known bool
	var silent time.Duration
	if err := env.Cluster.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		live, silent, known = lv.Live(driverName, node, time.Now())
		return known && live == want, nil
	}); err != nil {
		t.Fatalf("Live(%s) = %v (silent %s, known %v), want live %v: %v", node, live, silent, known, want, err)
	}
	return silent
}

// csi-node-publisher renews the driver's heartbeat Lease while a
// node-local mock driver (--mode=both, the node as its segment) runs; after
// kill -9 of the driver the Lease is no longer renewed and Liveness reports
// the driver not live once the TTL has passed; a restarted driver is live
// again at once.
func TestDriverHeartbeat(t *testing.T) {
	ctx, _ := lab.NewNamespace(t, env.Cluster, "e2e-")
	const node, ttl = "node-heartbeat", 4 * time.Second
	n, err := env.Cluster.CreateNode(ctx, node, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node, metav1.DeleteOptions{}) })
	dir, err := os.MkdirTemp("", "hb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	starts := 0
	startDriver := func() *controlplane.Process {
		t.Helper()
		starts++
		p, err := env.Cluster.StartProcess("mock-driver-"+node+"-"+strconv.Itoa(starts), filepath.Join(env.BinDir, "mock-driver"), []string{
			"--mode=both", "--node-id=" + node, "--node-topology=" + hostnameKey + "=" + node,
			"--capacity-bytes=" + strconv.FormatInt(10*gi, 10), "--state-file=" + filepath.Join(dir, "state.json"),
			"--endpoint=unix://" + sock, "-v=2",
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(15 * time.Second) })
		return p
	}
	drv := startDriver()
	kc, err := env.Cluster.ServiceAccountKubeconfig(ctx, lab.PublisherNamespace, "csi-node-publisher")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := env.Cluster.StartProcess("csi-node-publisher-"+node, filepath.Join(env.BinDir, "csi-node-publisher"), []string{
		"--csi-address=unix://" + sock, "--kubeconfig=" + kc, "--node-name=" + node, "--lease-namespace=" + lab.PublisherNamespace,
		"--lease-duration=" + ttl.String(), "--lease-renew-interval=1s", "-v=2",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Stop(15 * time.Second) })
	lv := leaseLiveness(t, ctx)
	leases := client.CoordinationV1().Leases(lab.PublisherNamespace)
	name := heartbeat.LeaseName(driverName, node)
	getLease := func() *coordinationv1.Lease {
		t.Helper()
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	t.Run("renewed while the driver runs", func(t *testing.T) {
		waitLive(t, ctx, lv, node, true)
		l := getLease()
		if ptr.Deref(l.Spec.HolderIdentity, "") != node || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != int32(ttl/time.Second) ||
			l.Labels[heartbeat.LeaseDriverLabel] != driverName {
			t.Errorf("lease %s: holder %v, duration %v, labels %v", name, l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Labels)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].UID != n.UID {
			t.Errorf("lease owner references %+v, want the Node %s", l.OwnerReferences, n.UID)
		}
		first := l.Spec.RenewTime.Time
		if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			return getLease().Spec.RenewTime.After(first), nil
		}); err != nil {
			t.Errorf("lease not renewed after %s: %v", first, err)
		}
		// The node-local driver's segment is the node: its CSINode entry
		// has the hostname key.
		entries, _, err := ourEntries(ctx, node)
		if err != nil || len(entries) != 1 || len(entries[0].TopologyKeys) != 1 || entries[0].TopologyKeys[0] != hostnameKey {
			t.Errorf("CSINode entries of %s: %+v, %v; want one with the key %s", node, entries, err, hostnameKey)
		}
	})

	t.Run("not live after kill -9 and the TTL", func(t *testing.T) {
		drv.Kill()
		killed := time.Now()
		silent := waitLive(t, ctx, lv, node, false)
		t.Logf("not live %s after the kill, silent for %s", time.Since(killed).Round(time.Millisecond), silent.Round(time.Millisecond))
		// Not renewed behind the informer's back either, and at most one
		// renewal (whose Probe answered just before the kill) after it.
		if l := getLease(); l.Spec.RenewTime.Add(ttl).After(time.Now()) || l.Spec.RenewTime.After(killed.Add(time.Second)) {
			t.Errorf("lease renewed at %s, after the kill at %s", l.Spec.RenewTime.Time, killed)
		}
		lab.WaitLogged(t, ctx, env.Cluster, pub.LogPath(), "no longer renewing its heartbeat Lease")
		lab.WaitLogged(t, ctx, env.Cluster, pub.LogPath(), `reason="probe_failed"`)
		if pub.Exited() {
			t.Fatalf("csi-node-publisher exited: %v", pub.Wait())
		}
	})

	t.Run("live again once the driver is back", func(t *testing.T) {
		before := ptr.Deref(getLease().Spec.LeaseTransitions, 0)
		startDriver()
		waitLive(t, ctx, lv, node, true)
		lab.WaitLogged(t, ctx, env.Cluster, pub.LogPath(), "CSI driver live again")
		if l := getLease(); ptr.Deref(l.Spec.LeaseTransitions, 0) != before+1 {
			t.Errorf("leaseTransitions %d, want %d (the driver's return)", ptr.Deref(l.Spec.LeaseTransitions, 0), before+1)
		}
	})
}

// The publisher's ServiceAccount may get, create and update
// Leases in its own namespace, and nothing else on Leases.
func TestPublisherLeaseRBAC(t *testing.T) {
	ctx, _ := lab.NewNamespace(t, env.Cluster, "e2e-")
	kc, err := env.Cluster.ServiceAccountKubeconfig(ctx, lab.PublisherNamespace, "csi-node-publisher")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dryRun := []string{metav1.DryRunAll}
	own := sa.CoordinationV1().Leases(lab.PublisherNamespace)
	// Every lab node's publisher keeps one.
	name := heartbeat.LeaseName(driverName, "node-z1-a")
	var l *coordinationv1.Lease
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		l, err = own.Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("get the lease %s: %v", name, err)
	}
	if _, err := own.Update(ctx, l, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("update the lease: %v", err)
	}
	fresh := func(ns string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe", Namespace: ns}}
	}
	if _, err := own.Create(ctx, fresh(lab.PublisherNamespace), metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("create a lease: %v", err)
	}
	for what, call := range map[string]func() error{
		"list leases":  func() error { _, err := own.List(ctx, metav1.ListOptions{}); return err },
		"watch leases": func() error { _, err := own.Watch(ctx, metav1.ListOptions{}); return err },
		"delete a lease": func() error {
			return own.Delete(ctx, name, metav1.DeleteOptions{DryRun: dryRun})
		},
		"create a lease in kube-node-lease": func() error {
			_, err := sa.CoordinationV1().Leases("kube-node-lease").Create(ctx, fresh("kube-node-lease"), metav1.CreateOptions{DryRun: dryRun})
			return err
		},
		"create a lease in default": func() error {
			_, err := sa.CoordinationV1().Leases("default").Create(ctx, fresh("default"), metav1.CreateOptions{DryRun: dryRun})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
}
