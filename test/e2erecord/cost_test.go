package e2erecord

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// costClaims is how many claims TestRequestsPerVolume provisions.
const costClaims = 20

// response matches client-go's request log at -v=6.
var response = regexp.MustCompile(`"Response" .*?verb="([A-Z]+)" url="([^"]+)"`)

// probeKey marks the probes of optional APIs in requestCounts.
const probeKey = "probe (LIST limit=1)"

// requestCounts counts csi-provisioner's API requests in its log from
// offset on, by "VERB resource" (watches excluded).
func requestCounts(t *testing.T, path string, offset int64) (map[string]int, int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range response.FindAllStringSubmatch(string(data[offset:]), -1) {
		u, err := url.Parse(m[2])
		if err != nil || u.Query().Get("watch") == "true" {
			continue
		}
		// /api/v1/[namespaces/<ns>/]<resource>[/<name>], /apis/<group>/<version>/...
		parts := strings.Split(strings.Trim(u.Path, "/"), "/")
		if parts[0] == "apis" && len(parts) > 3 {
			parts = parts[3:]
		} else if len(parts) > 2 {
			parts = parts[2:]
		}
		if len(parts) > 2 && parts[0] == "namespaces" {
			parts = parts[2:]
		}
		resource := parts[0]
		if m[1] == "GET" && len(parts) == 1 && u.Query().Get("limit") == "1" {
			// A probe of an optional API that is missing (internal/optionalapi):
			// a fixed cost, spaced out to once a minute, not a cost per volume.
			out[probeKey+" "+resource]++
			continue
		}
		out[m[1]+" "+resource]++
	}
	return out, int64(len(data))
}

func describe(counts map[string]int, n int) string {
	keys := make([]string, 0, len(counts))
	total := 0
	for k, v := range counts {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %4d  (%.2f per volume)\n", k, counts[k], float64(counts[k])/float64(n))
	}
	fmt.Fprintf(&b, "  %-40s %4d  (%.2f per volume)\n", "total", total, float64(total)/float64(n))
	return b.String()
}

// TestRequestsPerVolume counts csi-provisioner's API requests (client-go's
// request log at -v=6) for provisioning costClaims immediate-binding claims,
// and for deleting them. With the in-flight record a provisioned volume
// costs its claim PATCH (the finalizer), its PV create, one Event and the
// PATCH that removes the finalizer once the PV exists: at most 4 requests,
// and no bound claim keeps the finalizer. A deleted claim and its volume
// cost at most 2 (the PV's delete and the PATCH of its finalizer).
func TestRequestsPerVolume(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "rec-")
	class := lab.NewClass(t, ctx, env.Cluster, "rec-cost", lab.ClassOptions{Immediate: true})
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartProvisioner("-v=6", "--http-endpoint="+addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.StartProvisioner(); err != nil {
			t.Errorf("restarting csi-provisioner: %v", err)
		}
	})
	log := env.Provisioner().LogPath()
	// /readyz answers 200 once the informers' caches have synced: their
	// initial lists are not a cost per volume. A loaded machine can take
	// longer than any fixed sleep for them.
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return lab.HTTPStatus(ctx, "http://"+addr+"/readyz") == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("csi-provisioner not ready: %v", err)
	}
	time.Sleep(2 * time.Second) // optional APIs' first probes
	_, offset := requestCounts(t, log, 0)

	var claims []*v1.PersistentVolumeClaim
	for i := range costClaims {
		claims = append(claims, lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("c%02d", i), class, 1<<30))
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, c := range list.Items {
			if c.Status.Phase == v1.ClaimBound {
				bound++
			}
		}
		return bound == costClaims, nil
	}); err != nil {
		t.Fatalf("claims not bound: %v", err)
	}
	var provision map[string]int
	// Events are posted asynchronously: wait for one per volume.
	_ = env.Cluster.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) {
		provision, _ = requestCounts(t, log, offset)
		return provision["POST events"] >= costClaims, nil
	})
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return len(claimsWithRecord(ctx, ns)) == 0, nil
	}); err != nil {
		t.Errorf("bound claims keep the in-flight finalizer: %v", claimsWithRecord(ctx, ns))
	}
	time.Sleep(2 * time.Second)
	provision, offset = requestCounts(t, log, offset)
	t.Logf("csi-provisioner --in-flight-record=%t, requests for provisioning %d volumes:\n%s", *inFlightRecord, costClaims, describe(provision, costClaims))

	for _, c := range claims {
		deleteClaim(t, ctx, c)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("PVs not deleted: %v", err)
	}
	time.Sleep(2 * time.Second)
	deletion, _ := requestCounts(t, log, offset)
	t.Logf("requests for deleting %d claims and their volumes:\n%s", costClaims, describe(deletion, costClaims))

	perVolume := 2
	if *inFlightRecord {
		perVolume = 4
	}
	if total := countedRequests(provision); total > perVolume*costClaims {
		t.Errorf("%d requests for %d provisioned volumes, more than %d per volume", total, costClaims, perVolume)
	}
	if total := countedRequests(deletion); total > 2*costClaims {
		t.Errorf("%d requests for %d deleted claims and volumes, more than 2 per volume", total, costClaims)
	}
}

// countedRequests sums counts without the probes of optional APIs.
func countedRequests(counts map[string]int) int {
	total := 0
	for k, v := range counts {
		if !strings.HasPrefix(k, probeKey) {
			total += v
		}
	}
	return total
}

// claimsWithRecord returns the claims of ns that carry the in-flight
// finalizer (one entry saying so when the list fails).
func claimsWithRecord(ctx context.Context, ns string) []string {
	list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"(listing claims failed: " + err.Error() + ")"}
	}
	var out []string
	for _, c := range list.Items {
		if slices.Contains(c.Finalizers, inflight.Finalizer) {
			out = append(out, c.Name)
		}
	}
	return out
}
