package informercache

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/fakewatch"
)

// The cache metrics count each watch event of the claim and PV informers
// (the initial list's adds included) and not their resyncs, and the gauges
// follow what the informers hold.
func TestCacheEventsMetric(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listed := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "listed", ResourceVersion: "1"}}
	client := fake.NewClientset(listed)
	// The changes below must reach both informers' watches.
	watching := fakewatch.Opened(t, &client.Fake, "persistentvolumeclaims", "persistentvolumes")
	// A resync every 50 ms: the handler must not count them.
	factory := informers.NewSharedInformerFactory(client, 50*time.Millisecond)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	reg := metrics.NewKubeRegistry()
	if err := RegisterMetrics(reg, claims, volumes); err != nil {
		t.Fatal(err)
	}
	var resyncs atomic.Int32
	if _, err := claims.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			if o.(*v1.PersistentVolumeClaim).ResourceVersion == n.(*v1.PersistentVolumeClaim).ResourceVersion {
				resyncs.Add(1)
			}
		},
	}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	watching()

	c := client.CoreV1()
	updated := listed.DeepCopy()
	updated.ResourceVersion, updated.Labels = "2", map[string]string{"a": "b"}
	if _, err := c.PersistentVolumeClaims("ns").Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PersistentVolumes().Create(ctx, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv", ResourceVersion: "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.PersistentVolumes().Delete(ctx, "pv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Claims: the listed add and the update; volumes: add and delete. The
	// wait also lets resyncs happen (at least 3).
	want := `
# HELP csi_topology_provisioner_cache_events_total [ALPHA] Watch events (adds, updates, deletes; the initial list's adds included, resyncs not) the provisioner's informer of claims or volumes received.
# TYPE csi_topology_provisioner_cache_events_total counter
csi_topology_provisioner_cache_events_total{resource="claims"} 2
csi_topology_provisioner_cache_events_total{resource="volumes"} 2
# HELP csi_topology_provisioner_cached_claims [ALPHA] Objects the provisioner's informer of claims holds (with node deployment's selection by label, its own node's and the pool's only).
# TYPE csi_topology_provisioner_cached_claims gauge
csi_topology_provisioner_cached_claims 1
# HELP csi_topology_provisioner_cached_volumes [ALPHA] Objects the provisioner's informer of volumes holds (with node deployment's selection by label, its own node's and the pool's only).
# TYPE csi_topology_provisioner_cached_volumes gauge
csi_topology_provisioner_cached_volumes 0
`
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = testutil.GatherAndCompare(reg, strings.NewReader(want), "csi_topology_provisioner_cache_events_total",
			"csi_topology_provisioner_cached_claims", "csi_topology_provisioner_cached_volumes")
		return last == nil && resyncs.Load() >= 3, nil
	}); err != nil {
		t.Fatalf("after %d resyncs: %v", resyncs.Load(), last)
	}
}
