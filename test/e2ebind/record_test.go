package e2ebind

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// TestBindThroughWithTheInFlightRecord runs bind-through with the in-flight
// record (on by default) on a burst of 20 claims, bound by csi-provisioner
// alone (kube-controller-manager stopped once they are handed to it), with
// CreateVolume slow and failing UNAVAILABLE one time in three (retried);
// 4 claims are deleted while their CreateVolume runs. The audit log shows
// the record written and removed for every claim; no Bound claim keeps it,
// no claim stays Terminating once kube-controller-manager is back, no
// volume leaks (the deleted claims' volumes included), and the binding
// invariants hold.
func TestBindThroughWithTheInFlightRecord(t *testing.T) {
	c := env.Cluster
	ctx, ns := lab.NewNamespace(t, c, "record")
	class := lab.NewClass(t, ctx, c, ns+"-now", lab.ClassOptions{Immediate: true})
	setFaults(t, ctx, faults.Rule{Method: "CreateVolume", Code: "Unavailable", Every: 3},
		// Slow enough that no claim is Bound before kube-controller-manager
		// stops, on a loaded machine too.
		faults.Rule{Method: "CreateVolume", Latency: faults.Duration(5 * time.Second)})
	names := newClaims(t, ctx, c, ns, "c", class, 20)
	waitMarkedForProvisioner(t, ctx, c, ns, names)
	startKCM := stopControllerManager(t, ctx, c)
	if n := boundNow(t, ctx, c, ns); n > 0 {
		t.Fatalf("%d claims were Bound before kube-controller-manager was stopped: CreateVolume was not slow enough for the test", n)
	}
	var gone []string
	doomed := map[string]bool{}
	for i := 0; i < len(names); i += 5 {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, names[i], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, lab.VolumeName(pvc))
		doomed[lab.VolumeName(pvc)] = true
	}
	waitCreateVolume(t, ctx, gone)
	var kept []string
	for i, name := range names {
		if i%5 != 0 {
			kept = append(kept, name)
			continue
		}
		if err := c.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ctx, c, ns, kept)
	startKCM()
	if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
		claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == len(kept), nil
	}); err != nil {
		t.Errorf("deleted claims not gone: %v\n%s", err, lab.Describe(ctx, c, ns))
	}
	checkSettled(t, ctx, c, ns)
	waitNoVolume(t, ctx, doomed)
	checkRecordWritten(t, c, ns, names)
	deleteAndCheckReclaim(t, ctx, c, ns)
}

// checkRecordWritten checks in the audit log that csi-provisioner wrote
// every claim of names at least twice: the record added (a PATCH), then
// removed (a PATCH of the record's keeper, or the binding UPDATE, which
// removes the record in the same write); the claims still there carry no
// record (checkSettled).
func checkRecordWritten(t *testing.T, c *controlplane.Cluster, ns string, names []string) {
	t.Helper()
	patches, updates := claimWrites(t, c, ns)
	for _, name := range names {
		if patches[name] < 1 || patches[name]+updates[name] < 2 {
			t.Errorf("claim %s: %d patches and %d updates by csi-provisioner in the audit log, want the record added (a patch) and removed (a patch or the binding update)",
				name, patches[name], updates[name])
		}
	}
	t.Logf("record patches per claim: %v; binding updates per claim: %v", fmt.Sprint(patches), fmt.Sprint(updates))
}

// claimWrites counts, by claim of ns, the patches and updates csi-provisioner
// made to the claims (not their status) in the audit log.
func claimWrites(t *testing.T, c *controlplane.Cluster, ns string) (patches, updates map[string]int) {
	t.Helper()
	patches, updates = map[string]int{}, map[string]int{}
	if err := controlplane.ReadAuditLog(c.AuditLog, func(e controlplane.AuditEvent) {
		ref := e.ObjectRef
		if ref == nil || ref.Resource != "persistentvolumeclaims" || ref.Namespace != ns || ref.Subresource != "" ||
			e.User.Username != provisionerUser || e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
			return
		}
		switch e.Verb {
		case "patch":
			patches[ref.Name]++
		case "update":
			updates[ref.Name]++
		}
	}); err != nil {
		t.Fatal(err)
	}
	return patches, updates
}
