package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Sizes of the burst of TestDriverKilledMidBurst.
const (
	lossImmediateClaims = 30
	lossDelayedClaims   = 10
)

// Losing the driver (docs/operations.md, "When the driver goes away"): the
// mock driver's controller is killed with SIGKILL in the middle of a burst
// of immediate and delayed-binding claims, and started again on the same
// socket and state file once the outage has been seen. Every claim ends
// Bound to exactly one driver volume and the driver holds no volume without
// a PV. In "driver", csi-provisioner rides the outage out: unready while
// the driver is away, ready again after, never restarted. In "driver and
// provisioner", csi-provisioner is killed too during the outage and started
// again, as a supervisor would, and waits for the driver.
func TestDriverKilledMidBurst(t *testing.T) {
	for _, tc := range []struct {
		name            string
		killProvisioner bool
	}{
		{name: "driver", killProvisioner: false},
		{name: "driver and provisioner", killProvisioner: true},
	} {
		t.Run(tc.name, func(t *testing.T) { driverKilledMidBurst(t, tc.killProvisioner) })
	}
}

func driverKilledMidBurst(t *testing.T, killProvisioner bool) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartProvisioner("--http-endpoint=" + addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	t.Cleanup(func() {
		if err := env.RestartController(); err != nil {
			t.Errorf("restarting the mock controller for the next tests: %v", err)
		}
	})
	immediate := lab.NewClass(t, ctx, env.Cluster, ns+"-imm", lab.ClassOptions{Immediate: true})
	delayed := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	// Half the CreateVolume calls take 3 s: when the first claims are
	// Bound, the others are still in the driver. The restarted driver has
	// no fault rules.
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Probability: 0.5, Latency: faults.Duration(3 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	// Should the test stop before the kill, the next tests get a driver
	// without the rule.
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	var claims []string
	for i := range lossImmediateClaims {
		name := fmt.Sprintf("imm-%02d", i)
		lab.NewClaim(t, ctx, env.Cluster, ns, name, immediate, gi)
		claims = append(claims, name)
	}
	for i := range lossDelayedClaims {
		name := fmt.Sprintf("wffc-%02d", i)
		lab.NewClaim(t, ctx, env.Cluster, ns, name, delayed, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, name, lab.PodOptions{Claims: []string{name}})
		claims = append(claims, name)
	}
	bound := waitBoundCount(t, ctx, ns, 3)
	env.KillController()
	t.Logf("mock controller killed with %d of %d claims Bound", bound, len(claims))

	readyz := "http://" + addr + "/readyz"
	if killProvisioner {
		env.KillProvisioner()
		if err := env.StartProvisioner("--http-endpoint=" + addr); err != nil {
			t.Fatal(err)
		}
		waitAnswer(t, ctx, readyz, http.StatusServiceUnavailable, "waiting for the CSI driver")
		lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "nothing listens on it")
	} else {
		waitAnswer(t, ctx, readyz, http.StatusServiceUnavailable, "no connection to CSI driver")
		waitAnswer(t, ctx, "http://"+addr+"/healthz", http.StatusServiceUnavailable, "no connection to CSI driver")
		if got := lab.MetricValue(lab.MustScrape(t, ctx, "http://"+addr+"/metrics"), "csi_topology_provisioner_driver_connected", nil); got != 0 {
			t.Errorf("driver_connected during the outage = %v, want 0", got)
		}
	}
	if err := env.RestartController(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	checkEveryClaimOnce(t, ctx, ns, claims)
	t.Logf("every claim Bound %s after the mock controller was restarted", time.Since(restarted).Round(100*time.Millisecond))
	waitAnswer(t, ctx, readyz, http.StatusOK, "ok")
	if env.Provisioner().Exited() {
		t.Fatalf("csi-provisioner exited: %v (log %s)", env.Provisioner().Wait(), env.Provisioner().LogPath())
	}
	m := lab.MustScrape(t, ctx, "http://"+addr+"/metrics")
	if got := lab.MetricValue(m, "csi_topology_provisioner_driver_connected", nil); got != 1 {
		t.Errorf("driver_connected after the outage = %v, want 1", got)
	}
	if !killProvisioner {
		if got := lab.MetricValue(m, "csi_topology_provisioner_driver_connection_losses_total", nil); got != 1 {
			t.Errorf("driver_connection_losses_total = %v, want 1", got)
		}
		lab.WaitLogged(t, ctx, env.Cluster, env.Provisioner().LogPath(), "Reconnected to the CSI driver")
		lines := logLines(t, env.Provisioner().LogPath(), "CSI driver", "Retrying pending claims")
		t.Logf("csi-provisioner's lines about the driver:\n%s", strings.Join(lines, "\n"))
		if n := countContaining(lines, "Lost connection to the CSI driver"); n != 1 {
			t.Errorf("csi-provisioner logged the loss %d times, want once", n)
		}
	}
	checkNoOrphanVolumes(t, ctx)
}

// waitBoundCount waits until at least n claims of ns are Bound and returns
// how many are.
func waitBoundCount(t *testing.T, ctx context.Context, ns string, n int) int {
	t.Helper()
	var count int
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		count = 0
		for _, c := range list.Items {
			if c.Status.Phase == v1.ClaimBound {
				count++
			}
		}
		return count >= n, nil
	}); err != nil {
		t.Fatalf("%d of %d claims Bound in %s: %v", count, n, ns, err)
	}
	return count
}

// checkEveryClaimOnce waits until every claim is Bound and checks that the
// driver has exactly one volume per claim (its CSI name carries the claim's
// UID), the one of the claim's PV.
func checkEveryClaimOnce(t *testing.T, ctx context.Context, ns string, claims []string) {
	t.Helper()
	handleOf := map[string]string{} // CSI volume name -> PV's volume handle
	for _, name := range claims {
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, name)
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		handleOf["pvc-"+string(pvc.UID)] = pv.Spec.CSI.VolumeHandle
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perName := map[string]int{}
	for _, v := range vols {
		handle, ours := handleOf[v.Name]
		if !ours {
			continue
		}
		perName[v.Name]++
		if v.ID != handle {
			t.Errorf("driver volume %s (%s) is not the one of its claim's PV (%s)", v.ID, v.Name, handle)
		}
	}
	for name := range handleOf {
		if perName[name] != 1 {
			t.Errorf("driver has %d volumes named %s, want 1", perName[name], name)
		}
	}
}

// checkNoOrphanVolumes waits until the driver's volumes are exactly those of
// the driver's PVs (PVs of earlier tests may still be being deleted).
func checkNoOrphanVolumes(t *testing.T, ctx context.Context) {
	t.Helper()
	var orphans, missing []string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		vols, err := env.Volumes(ctx)
		if err != nil {
			return false, nil
		}
		handles := map[string]bool{}
		for _, pv := range pvs.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driverName {
				handles[pv.Spec.CSI.VolumeHandle] = true
			}
		}
		orphans, missing = nil, nil
		for _, v := range vols {
			if !handles[v.ID] {
				orphans = append(orphans, v.ID+" ("+v.Name+")")
			}
			delete(handles, v.ID)
		}
		for h := range handles {
			missing = append(missing, h)
		}
		return len(orphans) == 0 && len(missing) == 0, nil
	})
	if err != nil {
		t.Errorf("driver volumes without a PV: %v; PVs without a driver volume: %v", orphans, missing)
	}
}

// waitAnswer waits until url answers code with a body containing want.
func waitAnswer(t *testing.T, ctx context.Context, url string, code int, want string) {
	t.Helper()
	var got int
	var body string
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		got, body = getBody(ctx, url)
		return got == code && strings.Contains(body, want), nil
	})
	if err != nil {
		t.Fatalf("%s answered %d %q, want %d with %q: %v", url, got, body, code, want, err)
	}
}

// getBody returns the status and body of a GET of url (0 when it fails).
func getBody(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(data)
}

// logLines returns the lines of the log file at path that contain any of
// subs.
func logLines(t *testing.T, path string, subs ...string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if countContaining([]string{l}, subs...) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// countContaining counts the lines that contain any of subs.
func countContaining(lines []string, subs ...string) int {
	n := 0
	for _, l := range lines {
		for _, s := range subs {
			if strings.Contains(l, s) {
				n++
				break
			}
		}
	}
	return n
}
