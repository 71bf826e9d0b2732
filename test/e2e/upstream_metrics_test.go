package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// upstreamMetrics are the series upstream's external-provisioner v6.3.0
// serves on its metrics path, with their label names (histograms by their
// _bucket series): a dashboard or alert written for it must find them on
// ours.
var upstreamMetrics = []struct {
	metric string
	labels []string
}{
	{"controller_persistentvolumeclaim_provision_total", []string{"class", "source"}},
	{"controller_persistentvolumeclaim_provision_failed_total", []string{"class", "source"}},
	{"controller_persistentvolumeclaim_provision_duration_seconds_bucket", []string{"class", "source", "le"}},
	{"controller_persistentvolume_delete_total", []string{"class"}},
	{"controller_persistentvolume_delete_failed_total", []string{"class"}},
	{"controller_persistentvolume_delete_duration_seconds_bucket", []string{"class", "le"}},
	{"csistoragecapacities_desired_goal", nil},
	{"csistoragecapacities_desired_current", nil},
	{"csistoragecapacities_obsolete", nil},
	{"leader_election_master_status", []string{"name"}},
	{"workqueue_depth", []string{"name"}},
	{"workqueue_adds_total", []string{"name"}},
	{"workqueue_queue_duration_seconds_bucket", []string{"name", "le"}},
	{"workqueue_work_duration_seconds_bucket", []string{"name", "le"}},
	{"workqueue_unfinished_work_seconds", []string{"name"}},
	{"workqueue_longest_running_processor_seconds", []string{"name"}},
	{"workqueue_retries_total", []string{"name"}},
	{"go_goroutines", nil},
	{"go_memstats_alloc_bytes", nil},
	{"process_start_time_seconds", nil},
	{"process_cpu_seconds_total", nil},
	{"csi_sidecar_operations_seconds_bucket", []string{"driver_name", "method_name", "grpc_status_code", "le"}},
}

// A provisioner started as upstream's would be (metrics endpoint, capacity,
// leader election) serves every upstream metric with upstream's label
// names, and they count what happened: one claim provisioned after one
// failed CreateVolume, then deleted after one failed DeleteVolume.
func TestUpstreamMetricsParity(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartProvisioner("--http-endpoint="+addr, "--enable-capacity", "--capacity-namespace=csi-topology",
		"--capacity-poll-interval=1h", "--leader-election", "--leader-election-namespace=csi-topology",
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	if err := env.SetFaults(ctx, []faults.Rule{
		{Method: "CreateVolume", Code: "Internal", Count: 1},
		{Method: "DeleteVolume", Code: "Internal", Count: 1},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	// Zone z1, with room: other tests of the package leave segments full
	// and extra nodes behind (stock_test.go's node-slot).
	if err := env.SetCapacity(ctx, "z1", 100*gi); err != nil {
		t.Fatal(err)
	}
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{lab.ZoneKey: "z1"}})
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data").Name
	zero := int64(0)
	if err := client.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("PV %s of the deleted claim not deleted: %v", pv, err)
	}

	url := "http://" + addr + "/metrics"
	// The library counts a delete right after the PV is gone, and the
	// capacity objects of the new class are made in the background: wait
	// for both (at most a few seconds), then check everything.
	_ = env.Cluster.WaitFor(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		m, err := lab.Scrape(ctx, url)
		if err != nil {
			return false, nil
		}
		goal := lab.MetricValue(m, "csistoragecapacities_desired_goal", nil)
		return lab.MetricValue(m, "controller_persistentvolume_delete_total", map[string]string{"class": class}) >= 1 &&
			goal > 0 && lab.MetricValue(m, "csistoragecapacities_desired_current", nil) == goal, nil
	})
	m := lab.MustScrape(t, ctx, url)
	for _, want := range upstreamMetrics {
		samples := m[want.metric]
		if len(samples) == 0 {
			t.Errorf("%s missing from %s", want.metric, url)
			continue
		}
		for _, s := range samples {
			var got []string
			for name := range s.Metric {
				if name != "__name__" {
					got = append(got, string(name))
				}
			}
			if !sameSet(got, want.labels) {
				t.Errorf("%s has labels %v, want %v", want.metric, got, want.labels)
				break
			}
		}
	}
	checkUpstreamValues(t, ctx, m, class)
}

// checkUpstreamValues checks that the upstream metrics count the test's
// workload.
func checkUpstreamValues(t *testing.T, ctx context.Context, m testutil.Metrics, class string) {
	t.Helper()
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		metric string
		labels map[string]string
		min    float64
		max    float64
	}{
		{"controller_persistentvolumeclaim_provision_total", map[string]string{"class": class, "source": ""}, 1, 1},
		{"controller_persistentvolumeclaim_provision_failed_total", map[string]string{"class": class, "source": ""}, 1, 1e9},
		{"controller_persistentvolumeclaim_provision_duration_seconds_count", map[string]string{"class": class}, 1, 1},
		{"controller_persistentvolume_delete_total", map[string]string{"class": class}, 1, 1},
		{"controller_persistentvolume_delete_failed_total", nil, 1, 1e9},
		{"controller_persistentvolume_delete_duration_seconds_count", map[string]string{"class": class}, 1, 1},
		// One object per (segment, delayed-binding class of the driver):
		// this test's class alone wants one per segment.
		{"csistoragecapacities_desired_goal", nil, float64(len(segs)), 1e9},
		{"csistoragecapacities_obsolete", nil, 0, 0},
		{"leader_election_master_status", nil, 1, 1},
		{"workqueue_adds_total", map[string]string{"name": "claims"}, 1, 1e9},
		{"workqueue_adds_total", map[string]string{"name": "volumes"}, 1, 1e9},
	} {
		if got := lab.MetricValue(m, c.metric, c.labels); got < c.min || got > c.max {
			t.Errorf("%s %v = %v, want [%v, %v]", c.metric, c.labels, got, c.min, c.max)
		}
	}
	if goal, current := lab.MetricValue(m, "csistoragecapacities_desired_goal", nil), lab.MetricValue(m, "csistoragecapacities_desired_current", nil); current != goal {
		t.Errorf("csistoragecapacities_desired_current = %v, want the goal %v once the objects are made", current, goal)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
