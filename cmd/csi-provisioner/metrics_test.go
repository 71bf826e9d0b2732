package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
)

// The process-wide metrics upstream's external-provisioner serves (work
// queues, leader election, Go runtime, process) are on our metrics path
// too, with upstream's label names.
func TestMetricsEndpointServesProcessMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mm := newMetricsManager()
	mux := newMux(ctx, config{metricsPath: "/metrics"}, mm, &health{address: "/csi.sock"})

	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "metrics-test"})
	q.AddRateLimited("item")
	item, _ := q.Get()
	q.Done(item)
	q.ShutDown()
	runLeaderElectionOnce(t, ctx, "metrics-test-lease")

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	m := testutil.NewMetrics()
	if err := testutil.ParseMetrics(rec.Body.String(), &m); err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	tests := []struct {
		metric string
		labels []string
	}{
		{"workqueue_depth", []string{"name"}},
		{"workqueue_adds_total", []string{"name"}},
		{"workqueue_queue_duration_seconds_bucket", []string{"name", "le"}},
		{"workqueue_work_duration_seconds_bucket", []string{"name", "le"}},
		{"workqueue_unfinished_work_seconds", []string{"name"}},
		{"workqueue_longest_running_processor_seconds", []string{"name"}},
		{"workqueue_retries_total", []string{"name"}},
		{"leader_election_master_status", []string{"name"}},
		{"go_goroutines", nil},
		{"go_memstats_alloc_bytes", nil},
		{"process_start_time_seconds", nil},
		{"process_cpu_seconds_total", nil},
	}
	for _, tc := range tests {
		t.Run(tc.metric, func(t *testing.T) {
			samples := m[tc.metric]
			if len(samples) == 0 {
				t.Fatalf("%s missing from /metrics", tc.metric)
			}
			for _, s := range samples {
				var got []string
				for name := range s.Metric {
					if name != "__name__" {
						got = append(got, string(name))
					}
				}
				slices.Sort(got)
				if want := slices.Sorted(slices.Values(tc.labels)); !slices.Equal(got, want) {
					t.Fatalf("%s has labels %v, want %v", tc.metric, got, want)
				}
			}
		})
	}
	if got := len(m["process_start_time_seconds"]); got != 1 {
		t.Errorf("process_start_time_seconds has %d samples, want 1", got)
	}
}

// runLeaderElectionOnce acquires a Lease named name on a fake API server
// and gives it back.
func runLeaderElectionOnce(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	client := fake.NewClientset()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "default", name, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var led atomic.Bool
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: true, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { led.Store(true); cancel() },
			OnStoppedLeading: func() {},
		},
	})
	if !led.Load() {
		t.Fatal("never became leader on the fake API server")
	}
}
