package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// After a known workload (3 delayed-binding claims, the
// first CreateVolume refused with RESOURCE_EXHAUSTED, one claim deleted) the
// provisioner's /metrics counts exactly that.
func TestMetricsAfterWorkload(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar's gRPC metrics are not per class: earlier tests' volumes
	// may still be deleted by this provisioner while it runs (their
	// namespaces are removed in the background). Its DeleteVolume count is
	// checked against the calls the driver answered since it started.
	env.StopProvisioner()
	before, err := env.Calls(ctx, "DeleteVolume")
	if err != nil {
		t.Fatal(err)
	}
	var sinceSeq int64
	if len(before) > 0 {
		sinceSeq = before[len(before)-1].Seq
	}
	if err := env.StartProvisioner("--http-endpoint="+addr, "--enable-capacity", "--capacity-namespace=csi-topology", "--capacity-poll-interval=1h"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	for i := 0; i < 3; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i), class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("data-%d", i)}})
	}
	var pv2 string
	for i := 0; i < 3; i++ {
		pv2 = lab.WaitBound(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i)).Name
	}
	zero := int64(0)
	if err := client.CoreV1().Pods(ns).Delete(ctx, "app-2", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv2, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("PV %s of the deleted claim not deleted: %v", pv2, err)
	}

	url := "http://" + addr + "/metrics"
	var m testutil.Metrics
	// The delete's metric is recorded right after the PV is gone; poll
	// briefly for it rather than race it.
	_ = env.Cluster.WaitFor(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		m = lab.MustScrape(t, ctx, url)
		return lab.MetricValue(m, "csi_topology_provisioner_operations_total", map[string]string{"operation": "delete", "storage_class": class}) >= 1, nil
	})
	// One RESOURCE_EXHAUSTED marks that segment full for a minute: when the
	// scheduler picks a node there again, the claim is sent back without a
	// CreateVolume, so reschedules may exceed 1 while the driver still saw
	// exactly one failed call.
	rescheduled := lab.MetricValue(m, "csi_topology_provisioner_reschedules_total", map[string]string{"reason": "NoCapacity"})
	if rescheduled < 1 {
		t.Errorf("reschedules_total{NoCapacity} = %v, want at least 1", rescheduled)
	}
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"csi_topology_provisioner_operations_total", map[string]string{"operation": "provision", "storage_class": class, "result": "success"}, 3},
		{"csi_topology_provisioner_operations_total", map[string]string{"operation": "provision", "storage_class": class, "result": "reschedule"}, rescheduled},
		{"csi_topology_provisioner_operations_total", map[string]string{"operation": "delete", "storage_class": class, "result": "success"}, 1},
		{"csi_topology_provisioner_operation_duration_seconds_count", map[string]string{"operation": "provision", "storage_class": class}, 3 + rescheduled},
		{"csi_topology_provisioner_selected_node_to_pv_seconds_count", map[string]string{"storage_class": class}, 3},
		{"csi_sidecar_operations_seconds_count", map[string]string{"method_name": "/csi.v1.Controller/CreateVolume", "grpc_status_code": "ResourceExhausted"}, 1},
	} {
		if got := lab.MetricValue(m, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
	checkDeleteCalls(t, ctx, sinceSeq, url)
	if got := lab.MetricValue(m, "csi_sidecar_operations_seconds_count", map[string]string{"method_name": "/csi.v1.Controller/CreateVolume", "grpc_status_code": "OK"}); got < 3 {
		t.Errorf("CreateVolume OK calls = %v, want at least 3", got)
	}
	// One object per (segment, delayed-binding class of the driver): this
	// test's class alone has one per segment of the lab.
	segs, err := env.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := lab.MetricValue(m, "csi_topology_provisioner_capacity_objects", nil); got < float64(len(segs)) {
		t.Errorf("capacity_objects = %v, want at least %d", got, len(segs))
	}
	if got := lab.HTTPStatus(ctx, "http://"+addr+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz without leader election = %d, want 200", got)
	}
}

// checkDeleteCalls checks csi_sidecar_operations_seconds_count for
// successful DeleteVolume calls against the driver's record of them
// after sinceSeq: at least this test's one, and exactly as many as the
// driver answered (counted before and after a scrape, so that a delete of an
// earlier test's volume running meanwhile cannot make it flaky).
func checkDeleteCalls(t *testing.T, ctx context.Context, sinceSeq int64, url string) {
	t.Helper()
	labels := map[string]string{"method_name": "/csi.v1.Controller/DeleteVolume", "grpc_status_code": "OK"}
	answered := func() int {
		calls, err := env.Calls(ctx, "DeleteVolume")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range calls {
			if c.Seq > sinceSeq && c.Code == "OK" && !c.CallerGone {
				n++
			}
		}
		return n
	}
	var got float64
	var low, high int
	// A delete of an earlier test's volume may be answered while this
	// looks, or its answer not yet counted: look until both agree.
	err := env.Cluster.WaitFor(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		low = answered()
		got = lab.MetricValue(lab.MustScrape(t, ctx, url), "csi_sidecar_operations_seconds_count", labels)
		high = answered()
		return got >= 1 && low == high && got == float64(low), nil
	})
	if err != nil {
		t.Errorf("csi_sidecar_operations_seconds_count%v = %v, want the %d..%d successful DeleteVolume calls the driver answered since the provisioner started (at least 1): %v",
			labels, got, low, high, err)
	}
}

// Two replicas, only the leader provisions; kill
// -9 the leader and the other takes over once the lease runs out; every
// claim is provisioned exactly once.
func TestLeaderElectionFailover(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	const lease, retry = 4 * time.Second, 500 * time.Millisecond
	env.StopProvisioner()
	t.Cleanup(func() { _ = env.StartProvisioner() })
	type replica struct {
		p    *controlplane.Process
		addr string
	}
	var replicas []replica
	for i := 0; i < 2; i++ {
		addr, err := lab.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p, err := env.StartProvisionerReplica(fmt.Sprintf("csi-provisioner-replica-%d", i), "--http-endpoint="+addr,
			"--leader-election", "--leader-election-namespace=csi-topology",
			"--leader-election-lease-duration="+lease.String(), "--leader-election-renew-deadline=3s",
			"--leader-election-retry-period="+retry.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(15 * time.Second) })
		replicas = append(replicas, replica{p, addr})
	}
	leader := -1
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		ready := 0
		for i, r := range replicas {
			if lab.HTTPStatus(ctx, "http://"+r.addr+"/readyz") == http.StatusOK {
				ready++
				leader = i
			}
		}
		return ready == 1, nil
	}); err != nil {
		t.Fatalf("no single leader: %v", err)
	}
	standby := 1 - leader
	if got := lab.HTTPStatus(ctx, "http://"+replicas[standby].addr+"/healthz"); got != http.StatusOK {
		t.Errorf("standby /healthz = %d, want 200 (alive, just not leading)", got)
	}

	const n = 6
	for i := 0; i < n/2; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i), class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("data-%d", i)}})
	}
	for i := 0; i < n/2; i++ {
		lab.WaitBound(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i))
	}
	standbyMetrics := lab.MustScrape(t, ctx, "http://"+replicas[standby].addr+"/metrics")
	if got := lab.MetricValue(standbyMetrics, "csi_topology_provisioner_operations_total", map[string]string{"operation": "provision"}); got != 0 {
		t.Errorf("the standby provisioned %v times", got)
	}

	// Kill the leader; claims created now wait for the standby.
	replicas[leader].p.Kill()
	killed := time.Now()
	for i := n / 2; i < n; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i), class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("data-%d", i)}})
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return lab.HTTPStatus(ctx, "http://"+replicas[standby].addr+"/readyz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the standby never took over: %v", err)
	}
	takeover := time.Since(killed)
	t.Logf("takeover %s after kill -9 (lease %s, retry %s)", takeover.Round(10*time.Millisecond), lease, retry)
	// The Lease expires lease after the leader's last renewal; the standby
	// tries every retry period. Allow scheduling noise on a loaded machine.
	if limit := lease + 2*retry + 3*time.Second; takeover > limit {
		t.Errorf("takeover took %s, more than the lease allows (%s)", takeover, limit)
	}
	waitExactlyOnce(t, ctx, ns, n)
	newLeader := lab.MustScrape(t, ctx, "http://"+replicas[standby].addr+"/metrics")
	if got := lab.MetricValue(newLeader, "csi_topology_provisioner_operations_total", map[string]string{"operation": "provision", "storage_class": class, "result": "success"}); got != n/2 {
		t.Errorf("the new leader provisioned %v claims, want %d", got, n/2)
	}
}

// The values of the Secrets a class names never reach the
// logs of csi-provisioner (-v=5, text and JSON) or of the mock driver, through
// a provision and a delete that send them to the driver.
func TestSecretsNeverLogged(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	const secretValue = "s3cr3t-value-7f4e1c"
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": secretValue, "token": secretValue + "-token"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			if err := env.StartProvisioner("-v=5", "--logging-format="+format); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.StartProvisioner() })
			class := lab.NewClass(t, ctx, env.Cluster, ns+"-"+format, lab.ClassOptions{Immediate: true})
			sc, err := client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Classes are immutable in parameters: make a new one with the
			// secret keys of every kind the provisioner handles.
			if err := client.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			sc.ResourceVersion = ""
			sc.Parameters = map[string]string{}
			for _, kind := range []string{"provisioner", "controller-publish", "node-stage", "node-publish", "controller-expand", "node-expand"} {
				sc.Parameters["csi.storage.k8s.io/"+kind+"-secret-name"] = "creds"
				sc.Parameters["csi.storage.k8s.io/"+kind+"-secret-namespace"] = "${pvc.namespace}"
			}
			if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			lab.NewClaim(t, ctx, env.Cluster, ns, "data-"+format, class, gi)
			pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data-"+format)
			if pv.Annotations["volume.kubernetes.io/provisioner-deletion-secret-name"] != "creds" {
				t.Errorf("PV does not record the deletion secret: %v", pv.Annotations)
			}
			if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-"+format, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
				_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}); err != nil {
				t.Fatalf("PV %s not deleted: %v", pv.Name, err)
			}
			// The driver did receive the secret (so the logs had a chance to
			// leak it).
			reqs, err := env.CreateRequests(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sawSecret := false
			for _, r := range reqs {
				if r.Name == pv.Name && slices.Contains(r.SecretKeys, "password") {
					sawSecret = true
				}
			}
			if !sawSecret {
				t.Errorf("CreateVolume for %s carried no secrets; the test proves nothing", pv.Name)
			}
			logPath := env.Provisioner().LogPath()
			env.StopProvisioner() // flush
			for _, f := range []string{logPath, env.ControllerLogPath()} {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(data), pv.Name) {
					t.Errorf("%s does not mention %s: not the log of this provision", f, pv.Name)
				}
				if strings.Contains(string(data), secretValue) {
					t.Errorf("%s contains the secret value", f)
				}
				if format == "json" && f == logPath && !strings.HasPrefix(strings.TrimSpace(string(data)), "{") {
					t.Errorf("%s is not JSON: %.200s", f, data)
				}
			}
		})
	}
}
