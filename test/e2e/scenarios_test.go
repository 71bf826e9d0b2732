package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Scenario 1: immediate binding, no topology in the class.
func TestImmediateBinding(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-imm", lab.ClassOptions{Immediate: true})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName || pv.Spec.CSI.VolumeHandle == "" {
		t.Fatalf("PV source = %+v, want CSI of %s", pv.Spec.CSI, driverName)
	}
	vol := volumeOf(t, ctx, pv)
	if zones := affinityZones(pv); len(zones) != 1 || zones[0] != vol.Segment[zoneKey] {
		t.Errorf("PV affinity zones %v, driver volume in %v", zones, vol.Segment)
	}
}

// Scenario 2: WaitForFirstConsumer: the real scheduler picks the node, the
// volume is made in that node's zone, the pod is bound there.
func TestWaitForFirstConsumer(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}})
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "app")
	zone := env.Nodes[node]
	if zones := affinityZones(pv); !slices.Equal(zones, []string{zone}) {
		t.Errorf("PV affinity zones %v, pod on %s in %s", zones, node, zone)
	}
	if got := volumeOf(t, ctx, pv).Segment[zoneKey]; got != zone {
		t.Errorf("driver volume in %s, want %s", got, zone)
	}
	if ev := lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"); !strings.Contains(ev, "selected node "+node) {
		t.Errorf("claim events do not tell the topology decision:%s", ev)
	}
}

// Scenario 3: allowedTopologies limited to z1 and z2, immediate and delayed.
func TestAllowedTopologies(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	imm := lab.NewClass(t, ctx, env.Cluster, ns+"-imm", lab.ClassOptions{Immediate: true, Zones: []string{"z1", "z2"}})
	wffc := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{Zones: []string{"z1", "z2"}})
	for i := 0; i < 3; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("imm-%d", i), imm, gi)
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("wffc-%d", i), wffc, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("wffc-%d", i)}})
	}
	for i := 0; i < 3; i++ {
		for _, claim := range []string{fmt.Sprintf("imm-%d", i), fmt.Sprintf("wffc-%d", i)} {
			pv := lab.WaitBound(t, ctx, env.Cluster, ns, claim)
			if z := volumeOf(t, ctx, pv).Segment[zoneKey]; z != "z1" && z != "z2" {
				t.Errorf("claim %s: volume in %s, outside allowedTopologies", claim, z)
			}
		}
	}

	// A pod pinned to the third zone cannot get a volume: it stays Pending
	// with a scheduler event, and nothing is created.
	before := mustNamespaceVolumes(t, ctx, ns)
	lab.NewClaim(t, ctx, env.Cluster, ns, "pinned", wffc, gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "pinned", lab.PodOptions{Claims: []string{"pinned"}, NodeSelector: map[string]string{zoneKey: "z3"}})
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return strings.Contains(lab.EventsOf(ctx, env.Cluster, ns, "Pod", "pinned"), "FailedScheduling"), nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for the pod pinned to z3: %v", err)
	}
	pod, err := client.CoreV1().Pods(ns).Get(ctx, "pinned", metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != "" {
		t.Errorf("pinned pod bound to %q (%v)", pod.Spec.NodeName, err)
	}
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "pinned", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase == v1.ClaimBound || pvc.Annotations["volume.kubernetes.io/selected-node"] != "" {
		t.Errorf("pinned claim: phase %s, annotations %v (%v)", pvc.Status.Phase, pvc.Annotations, err)
	}
	if after := mustNamespaceVolumes(t, ctx, ns); after != before {
		t.Errorf("driver volumes %d -> %d for an unschedulable pod", before, after)
	}
}

// Scenario 4: zone x rack, with the three allowed combinations of docs/topology.md's zone x rack example
// (z1 in racks r1 or r2, z2 in rack r1): every PV's affinity is one of them.
func TestZoneRackTopology(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	terms := []v1.TopologySelectorTerm{
		{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"z1"}}, {Key: rackKey, Values: []string{"r1", "r2"}}}},
		{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"z2"}}, {Key: rackKey, Values: []string{"r1"}}}},
	}
	allowed := map[string]bool{"z1/r1": true, "z1/r2": true, "z2/r1": true}
	imm := lab.NewClass(t, ctx, env.Cluster, ns+"-imm", lab.ClassOptions{Immediate: true, Terms: terms})
	wffc := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{Terms: terms})
	const n = 4
	for i := 0; i < n; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("imm-%d", i), imm, gi)
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("wffc-%d", i), wffc, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("wffc-%d", i)}})
	}
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		for _, claim := range []string{fmt.Sprintf("imm-%d", i), fmt.Sprintf("wffc-%d", i)} {
			pv := lab.WaitBound(t, ctx, env.Cluster, ns, claim)
			terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
			if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 {
				t.Fatalf("claim %s: affinity %+v, want one zone && rack term", claim, terms)
			}
			combo := map[string]string{}
			for _, e := range terms[0].MatchExpressions {
				combo[e.Key] = e.Values[0]
			}
			key := combo[zoneKey] + "/" + combo[rackKey]
			if !allowed[key] {
				t.Errorf("claim %s provisioned in %s, not one of the allowed combinations", claim, key)
			}
			seen[key] = true
		}
	}
	t.Logf("combinations used: %v", seen)
}

// Scenario 5: three pods of one app with required anti-affinity on zone
// land in three zones with their volumes; with one zone full the third pod
// stays Pending and nothing leaks.
func TestSpreadAcrossZones(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	zones := map[string]bool{}
	for i := 0; i < 3; i++ {
		claim := fmt.Sprintf("data-web-%d", i)
		lab.NewClaim(t, ctx, env.Cluster, ns, claim, class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("web-%d", i), lab.PodOptions{Claims: []string{claim}, AntiAffinityLabel: "web"})
	}
	for i := 0; i < 3; i++ {
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, fmt.Sprintf("data-web-%d", i))
		node := lab.WaitPodNode(t, ctx, env.Cluster, ns, fmt.Sprintf("web-%d", i))
		z := volumeOf(t, ctx, pv).Segment[zoneKey]
		if z != env.Nodes[node] {
			t.Errorf("web-%d on %s (%s) but its volume is in %s", i, node, env.Nodes[node], z)
		}
		zones[z] = true
	}
	if len(zones) != 3 {
		t.Errorf("volumes in %d zones, want 3", len(zones))
	}

	t.Run("one zone full", func(t *testing.T) {
		ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
		if err := env.SetCapacity(ctx, "z3", 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.SetCapacity(context.WithoutCancel(ctx), "z3", 100*gi) })
		before := mustNamespaceVolumes(t, ctx, ns)
		for i := 0; i < 3; i++ {
			claim := fmt.Sprintf("data-db-%d", i)
			lab.NewClaim(t, ctx, env.Cluster, ns, claim, class, gi)
			lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("db-%d", i), lab.PodOptions{Claims: []string{claim}, AntiAffinityLabel: "db"})
		}
		var bound, pending []string
		err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			bound, pending = nil, nil
			for i := 0; i < 3; i++ {
				pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, fmt.Sprintf("data-db-%d", i), metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if pvc.Status.Phase == v1.ClaimBound {
					bound = append(bound, pvc.Name)
				} else {
					pending = append(pending, pvc.Name)
				}
			}
			return len(bound) == 2, nil
		})
		if err != nil {
			t.Fatalf("bound %v pending %v: %v", bound, pending, err)
		}
		// The third claim keeps being sent back to the scheduler: z3 is full.
		err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			return strings.Contains(lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", pending[0]), "asking the scheduler to pick another node"), nil
		})
		if err != nil {
			t.Errorf("no reschedule event on %s:%s", pending[0], lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", pending[0]))
		}
		// Each attempt for the pending claim may briefly create a volume in
		// another zone before deleting it; in between, exactly the two bound
		// volumes remain.
		var after int
		err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			n, err := namespaceVolumes(ctx, ns)
			if err != nil {
				return false, nil
			}
			after = n
			return after == before+2, nil
		})
		if err != nil {
			t.Errorf("driver volumes %d -> %d, want exactly the 2 bound ones (nothing leaked)", before, after)
		}
	})
}

// Scenario 6: one pod with two claims of two classes: both volumes in the
// node's zone.
func TestTwoClaimsTwoClasses(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	a := lab.NewClass(t, ctx, env.Cluster, ns+"-a", lab.ClassOptions{})
	b := lab.NewClass(t, ctx, env.Cluster, ns+"-b", lab.ClassOptions{Reclaim: v1.PersistentVolumeReclaimRetain})
	lab.NewClaim(t, ctx, env.Cluster, ns, "a", a, gi)
	lab.NewClaim(t, ctx, env.Cluster, ns, "b", b, gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"a", "b"}})
	node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "app")
	for _, c := range []string{"a", "b"} {
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, c)
		if z := volumeOf(t, ctx, pv).Segment[zoneKey]; z != env.Nodes[node] {
			t.Errorf("claim %s in %s, pod's node %s in %s", c, z, node, env.Nodes[node])
		}
	}
}

// Scenario 7: the selected zone is full: the claim goes back to the
// scheduler, and once the pod may go elsewhere it is provisioned there.
func TestSelectedZoneFull(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Code: "ResourceExhausted",
		Message: "zone z1 is full", Segment: map[string]string{"zone": "z1"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	// First the pod can only go to z1: the provisioner must hand the claim
	// back to the scheduler.
	lab.NewPod(t, ctx, env.Cluster, ns, "first", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{zoneKey: "z1"}})
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		return strings.Contains(lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"), "zone z1 is full"), nil
	})
	if err != nil {
		t.Fatalf("no event about the full zone:%s", lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"))
	}
	lab.DeletePod(t, ctx, env.Cluster, ns, "first")
	// The stock scheduler knows nothing of capacity (the companion filter
	// does), so it could pick z1 again and again: the second pod keeps out.
	lab.NewPod(t, ctx, env.Cluster, ns, "second", lab.PodOptions{Claims: []string{"data"}, NotInZone: "z1"})
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "second")
	z := volumeOf(t, ctx, pv).Segment[zoneKey]
	if z == "z1" || z != env.Nodes[node] {
		t.Errorf("volume in %s, pod on %s in %s; want a zone other than z1, the pod's", z, node, env.Nodes[node])
	}
	ev := lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data")
	for _, want := range []string{"asking the scheduler to pick another node", "Successfully provisioned"} {
		if !strings.Contains(ev, want) {
			t.Errorf("claim events lack %q:%s", want, ev)
		}
	}
}

// Scenario 8: the selected node is deleted, or has no CSINode entry for the
// driver: the claim is rescheduled, not stuck.
func TestSelectedNodeGone(t *testing.T) {
	t.Run("no CSINode entry", func(t *testing.T) {
		ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
		class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
		if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-nocsi", Zone: "z2", Rack: "r1"}); err != nil {
			t.Fatal(err)
		}
		// The stock scheduler favours this empty node for every later pod,
		// and the provisioner would keep sending them back: remove it.
		t.Cleanup(func() {
			_ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), "node-nocsi", metav1.DeleteOptions{})
			delete(env.Nodes, "node-nocsi")
		})
		lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, "first", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{"kubernetes.io/hostname": "node-nocsi"}})
		err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			return strings.Contains(lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"), "CSINodeMissing"), nil
		})
		if err != nil {
			t.Fatalf("no CSINodeMissing event:%s", lab.EventsOf(ctx, env.Cluster, ns, "PersistentVolumeClaim", "data"))
		}
		lab.DeletePod(t, ctx, env.Cluster, ns, "first")
		// The stock scheduler knows nothing of CSINode entries and keeps
		// preferring the empty node-nocsi (test/e2eplugin shows ours
		// filtering it); what this test checks is the provisioner's side:
		// the claim was handed back and is provisioned for the next node.
		lab.NewPod(t, ctx, env.Cluster, ns, "second", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{"kubernetes.io/hostname": "node-z2-a"}})
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
		if node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "second"); node != "node-z2-a" {
			t.Errorf("pod bound to %s, want node-z2-a", node)
		}
		if z := volumeOf(t, ctx, pv).Segment[zoneKey]; z != "z2" {
			t.Errorf("volume in zone %s, want z2", z)
		}
	})
	t.Run("node deleted", func(t *testing.T) {
		ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
		class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
		env.StopProvisioner()
		t.Cleanup(func() {
			if env.Provisioner() == nil {
				_ = env.StartProvisioner()
			}
		})
		if err := env.AddNode(ctx, lab.NodeSpec{Name: "node-doomed", Zone: "z3", Rack: "r2", Driver: true}); err != nil {
			t.Fatal(err)
		}
		lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, "first", lab.PodOptions{Claims: []string{"data"}, NodeSelector: map[string]string{"kubernetes.io/hostname": "node-doomed"}})
		err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
			return err == nil && pvc.Annotations["volume.kubernetes.io/selected-node"] == "node-doomed", nil
		})
		if err != nil {
			t.Fatalf("scheduler did not select node-doomed: %v", err)
		}
		lab.DeletePod(t, ctx, env.Cluster, ns, "first")
		if err := client.CoreV1().Nodes().Delete(ctx, "node-doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(env.Nodes, "node-doomed")
		env.StopPublisher("node-doomed")
		lab.NewPod(t, ctx, env.Cluster, ns, "second", lab.PodOptions{Claims: []string{"data"}})
		if err := env.StartProvisioner(); err != nil {
			t.Fatal(err)
		}
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
		node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "second")
		if z := volumeOf(t, ctx, pv).Segment[zoneKey]; z != env.Nodes[node] {
			t.Errorf("volume in %s, pod on %s in %s", z, node, env.Nodes[node])
		}
	})
}

// Scenario 9: deleting a claim with reclaim policy Delete removes the PV and
// the driver's volume; Retain keeps both.
func TestDeleteAndRetain(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	del := lab.NewClass(t, ctx, env.Cluster, ns+"-delete", lab.ClassOptions{Immediate: true})
	keep := lab.NewClass(t, ctx, env.Cluster, ns+"-retain", lab.ClassOptions{Immediate: true, Reclaim: v1.PersistentVolumeReclaimRetain})
	lab.NewClaim(t, ctx, env.Cluster, ns, "gone", del, gi)
	lab.NewClaim(t, ctx, env.Cluster, ns, "kept", keep, gi)
	gone, kept := lab.WaitBound(t, ctx, env.Cluster, ns, "gone"), lab.WaitBound(t, ctx, env.Cluster, ns, "kept")
	for _, c := range []string{"gone", "kept"} {
		if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(ctx, gone.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("PV %s of the deleted claim still exists: %v", gone.Name, err)
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var goneFound, keptFound bool
	for _, v := range vols {
		goneFound = goneFound || v.ID == gone.Spec.CSI.VolumeHandle
		keptFound = keptFound || v.ID == kept.Spec.CSI.VolumeHandle
	}
	if goneFound || !keptFound {
		t.Errorf("driver volumes: deleted one present=%v, retained one present=%v", goneFound, keptFound)
	}
	err = env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, kept.Name, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == v1.VolumeReleased, nil
	})
	if err != nil {
		t.Errorf("retained PV not Released: %v", err)
	}
}

// Scenario 10: with --strict-topology requisite = preferred = the node's
// segment, as the driver recorded it.
func TestStrictTopology(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	if err := env.StartProvisioner("--strict-topology"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StartProvisioner() })
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	lab.NewClaim(t, ctx, env.Cluster, ns, "data", class, gi)
	lab.NewPod(t, ctx, env.Cluster, ns, "app", lab.PodOptions{Claims: []string{"data"}})
	lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	node := lab.WaitPodNode(t, ctx, env.Cluster, ns, "app")
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := env.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{{zoneKey: env.Nodes[node], rackKey: env.Racks[node]}}
	found := false
	for _, r := range reqs {
		if r.Name != "pvc-"+string(pvc.UID) {
			continue
		}
		found = true
		if !slices.EqualFunc(r.Requisite, want, mapsEqual) || !slices.EqualFunc(r.Preferred, want, mapsEqual) {
			t.Errorf("requisite %v preferred %v, want both %v", r.Requisite, r.Preferred, want)
		}
	}
	if !found {
		t.Errorf("driver recorded no CreateVolume for %s", pvc.UID)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Scenario 11: kill -9 the provisioner while claims are pending: every claim
// is Bound exactly once, with no duplicate or orphan volume.
func TestProvisionerCrash(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-wffc", lab.ClassOptions{})
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(300 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	const n = 8
	for i := 0; i < n; i++ {
		lab.NewClaim(t, ctx, env.Cluster, ns, fmt.Sprintf("data-%d", i), class, gi)
		lab.NewPod(t, ctx, env.Cluster, ns, fmt.Sprintf("app-%d", i), lab.PodOptions{Claims: []string{fmt.Sprintf("data-%d", i)}})
	}
	// Kill the provisioner once the first volume exists.
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		got, err := namespaceVolumes(ctx, ns)
		return err == nil && got > 0, nil
	}); err != nil {
		t.Fatalf("no volume created: %v", err)
	}
	env.Provisioner().Kill()
	if err := env.StartProvisioner(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM shuts the provisioner down cleanly: exit status 0.
		p := env.Provisioner()
		env.StopProvisioner()
		if err := p.Wait(); err != nil {
			t.Errorf("provisioner after SIGTERM: %v", err)
		}
		_ = env.StartProvisioner()
	})
	waitExactlyOnce(t, ctx, ns, n)
}
