package e2eswap

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// Latencies put on the driver's calls to keep them in flight across a swap:
// CreateVolume outlasts both provisioners' 10 s --timeout, so that no claim
// gets a volume while it is held (each attempt times out and is retried);
// DeleteVolume is slowed only.
const (
	holdCreate = 30 * time.Second
	holdDelete = 5 * time.Second
)

// world is the test's namespace, classes and claims.
type world struct {
	t         *testing.T
	ctx       context.Context
	ns        string
	immediate string
	wffc      string
	// live are the claims not deleted by the test; deleted those it
	// deleted.
	live, deleted []string
	// podless are WaitForFirstConsumer claims without a pod yet.
	podless []string
}

// TestSwapUpstreamOursUpstream: upstream provisions; ours replaces it
// while claims are bound, in flight, being deleted and pending; upstream
// replaces ours the same way (after csi-provisioner
// --remove-in-flight-records); then everything is deleted. No claim may
// stay Terminating, no volume may be left without a PV, no PV without a
// volume.
func TestSwapUpstreamOursUpstream(t *testing.T) {
	start := time.Now()
	w := newWorld(t, "swap")
	n := groupSize
	swapTo(t, upstream)

	// Upstream provisions group a.
	a := w.create("a", n, true)
	w.waitBound(a)

	// Mixed states, then ours replaces upstream.
	w.setHold(true)
	w.remove(immediateOf(a)[:n/4])
	b := w.create("b", n, true)
	w.create("p", n/2, false)
	w.waitEvent(b, "Provisioning")
	swapTo(t, "")
	w.setHold(false)
	w.waitBound(w.live)
	w.waitGone()
	t.Logf("upstream -> ours: %d claims Bound, %d deleted (%s)", len(w.live)-len(w.podless), len(w.deleted), time.Since(start).Round(time.Second))

	// Mixed states, then upstream replaces ours.
	w.setHold(true)
	c := w.create("c", n, true)
	w.waitRecord(c)
	w.remove(immediateOf(c)[:n/4])
	w.remove(immediateOf(a)[n/4 : n/2])
	w.givePods(w.podless[:len(w.podless)/2])
	env.StopProvisioner()
	w.setHold(false)
	if *removeRecords {
		out, err := env.RunProvisionerOnce(w.ctx, "--remove-in-flight-records")
		summary := ""
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "in-flight records of driver") || strings.HasPrefix(line, "kept: ") {
				summary += line + "\n"
			}
		}
		if err != nil {
			t.Errorf("csi-provisioner --remove-in-flight-records: %v\n%s", err, out)
		} else {
			t.Logf("csi-provisioner --remove-in-flight-records:\n%s", summary)
		}
	}
	swapTo(t, upstream)
	w.givePods(w.podless)
	w.waitBound(w.live)
	w.checkNoRecord()
	w.waitGone()
	t.Logf("ours -> upstream: %d claims Bound, %d deleted (%s)", len(w.live), len(w.deleted), time.Since(start).Round(time.Second))

	// Everything deleted, under upstream.
	w.remove(slices.Clone(w.live))
	w.waitGone()
	w.checkDriver()
	t.Logf("%d claims in 3 groups and %d pending, swapped twice and deleted in %s", 3*n, n/2, time.Since(start).Round(time.Second))
}

// swapTo stops the running provisioner and starts binary (ours when
// empty) with the same flags.
func swapTo(t *testing.T, binary string) {
	t.Helper()
	var err error
	if binary == "" {
		err = env.StartProvisioner()
	} else {
		err = env.StartProvisionerBinary(binary)
	}
	if err != nil {
		t.Fatalf("starting the provisioner: %v", err)
	}
}

// newWorld makes the namespace name, with its WaitForFirstConsumer class
// of the same name and an Immediate class name-immediate.
func newWorld(t *testing.T, name string) *world {
	_, ctx := ktesting.NewTestContext(t)
	w := &world{t: t, ctx: ctx, ns: name, immediate: name + "-immediate", wffc: name}
	env.NamespaceWithClass(t, ctx, w.ns)
	mode := storagev1.VolumeBindingImmediate
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: w.immediate}, Provisioner: lab.DriverName, VolumeBindingMode: &mode,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = env.SetFaults(ctx, nil)
		for _, class := range []string{w.immediate, w.wffc} {
			_ = client.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{})
		}
		_ = client.CoreV1().Namespaces().Delete(ctx, w.ns, metav1.DeleteOptions{})
	})
	return w
}

// create makes n claims named prefix-<i>: even ones Immediate, odd ones
// WaitForFirstConsumer, with a pod each when withPods.
func (w *world) create(prefix string, n int, withPods bool) []string {
	w.t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		class := w.immediate
		if i%2 == 1 {
			class = w.wffc
		}
		if _, err := client.CoreV1().PersistentVolumeClaims(w.ns).Create(w.ctx, &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
		if class == w.wffc {
			if withPods {
				env.PodPreferring(w.t, w.ctx, w.ns, name, "", "")
			} else {
				w.podless = append(w.podless, name)
			}
		}
		names = append(names, name)
	}
	w.live = append(w.live, names...)
	return names
}

// givePods creates the pods of WaitForFirstConsumer claims that have none.
func (w *world) givePods(names []string) {
	w.t.Helper()
	for _, name := range slices.Clone(names) {
		env.PodPreferring(w.t, w.ctx, w.ns, name, "", "")
		w.podless = slices.DeleteFunc(w.podless, func(s string) bool { return s == name })
	}
}

// immediateOf returns the Immediate claims of a group (the even ones).
func immediateOf(names []string) []string {
	var out []string
	for i, name := range names {
		if i%2 == 0 {
			out = append(out, name)
		}
	}
	return out
}

// remove deletes claims (and their pods, at once).
func (w *world) remove(names []string) {
	w.t.Helper()
	zero := int64(0)
	for _, name := range names {
		err := client.CoreV1().Pods(w.ns).Delete(w.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			w.t.Fatal(err)
		}
		if err := client.CoreV1().PersistentVolumeClaims(w.ns).Delete(w.ctx, name, metav1.DeleteOptions{}); err != nil {
			w.t.Fatal(err)
		}
		w.live = slices.DeleteFunc(w.live, func(s string) bool { return s == name })
		w.podless = slices.DeleteFunc(w.podless, func(s string) bool { return s == name })
		w.deleted = append(w.deleted, name)
	}
}

// setHold holds the driver's CreateVolume calls and slows its DeleteVolume
// calls (holdCreate, holdDelete); false clears every fault.
func (w *world) setHold(on bool) {
	w.t.Helper()
	var rules []faults.Rule
	if on {
		rules = []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(holdCreate)},
			{Method: "DeleteVolume", Latency: faults.Duration(holdDelete)}}
	}
	if err := env.SetFaults(w.ctx, rules); err != nil {
		w.t.Fatal(err)
	}
}

// claims returns the namespace's claims by name.
func (w *world) claims(ctx context.Context) (map[string]v1.PersistentVolumeClaim, error) {
	list, err := client.CoreV1().PersistentVolumeClaims(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]v1.PersistentVolumeClaim{}
	for _, c := range list.Items {
		out[c.Name] = c
	}
	return out, nil
}

// waitFor polls cond until it holds (an error is retried: the API may be
// slow on a loaded machine), and fails the test with the detail of the
// last answered poll otherwise.
func (w *world) waitFor(what string, cond func(ctx context.Context) (bool, string, error)) {
	w.t.Helper()
	detail := ""
	err := env.Cluster.WaitFor(w.ctx, waitTimeout(), func(ctx context.Context) (bool, error) {
		ok, d, err := cond(ctx)
		if err == nil {
			detail = d
		}
		return ok, nil
	})
	if err != nil {
		w.t.Fatalf("%s: %v: %s", what, err, detail)
	}
}

// waitBound waits until every claim of names that has a pod or is
// Immediate is Bound.
func (w *world) waitBound(names []string) {
	w.t.Helper()
	w.waitFor("claims not Bound", func(ctx context.Context) (bool, string, error) {
		claims, err := w.claims(ctx)
		if err != nil {
			return false, "", err
		}
		var pending []string
		for _, name := range names {
			if c := claims[name]; c.Status.Phase != v1.ClaimBound && !slices.Contains(w.podless, name) {
				pending = append(pending, name)
			}
		}
		return len(pending) == 0, fmt.Sprintf("%d pending: %v", len(pending), pending), nil
	})
}

// waitGone waits until every deleted claim is gone; the ones left are
// stuck Terminating.
func (w *world) waitGone() {
	w.t.Helper()
	w.waitFor("claims stuck Terminating", func(ctx context.Context) (bool, string, error) {
		claims, err := w.claims(ctx)
		if err != nil {
			return false, "", err
		}
		var stuck []string
		for _, name := range w.deleted {
			if c, ok := claims[name]; ok {
				stuck = append(stuck, fmt.Sprintf("%s %v", name, c.Finalizers))
			}
		}
		return len(stuck) == 0, fmt.Sprintf("%d stuck: %v", len(stuck), stuck), nil
	})
}

// waitRecord waits until every claim of names carries csi-provisioner's
// in-flight record: its CreateVolume is held.
func (w *world) waitRecord(names []string) {
	w.t.Helper()
	w.waitFor("claims without the in-flight record", func(ctx context.Context) (bool, string, error) {
		claims, err := w.claims(ctx)
		if err != nil {
			return false, "", err
		}
		var missing []string
		for _, name := range names {
			if c := claims[name]; !inflight.HasFinalizer(&c) {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d without: %v", len(missing), missing), nil
	})
}

// waitEvent waits until every claim of names has an Event of reason.
func (w *world) waitEvent(names []string, reason string) {
	w.t.Helper()
	w.waitFor("claims without a "+reason+" Event", func(ctx context.Context) (bool, string, error) {
		events, err := client.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		seen := map[string]bool{}
		for _, e := range events.Items {
			if e.Reason == reason && e.InvolvedObject.Kind == "PersistentVolumeClaim" {
				seen[e.InvolvedObject.Name] = true
			}
		}
		var missing []string
		for _, name := range names {
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d without: %v", len(missing), missing), nil
	})
}

// checkNoRecord fails the test when a claim carries the in-flight record
// under upstream, which never removes it: such a claim, once deleted,
// stays Terminating.
func (w *world) checkNoRecord() {
	w.t.Helper()
	claims, err := w.claims(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	var with []string
	for name, c := range claims {
		if inflight.HasFinalizer(&c) {
			with = append(with, name)
		}
	}
	slices.Sort(with)
	if len(with) > 0 {
		w.t.Errorf("%d claims carry %s under upstream, which never removes it: %v", len(with), inflight.Finalizer, with)
	}
}

// checkDriver waits until every volume of the driver has a PV and every PV
// of the driver a volume, and fails the test with the leaks otherwise.
func (w *world) checkDriver() {
	w.t.Helper()
	w.waitFor("driver and PVs disagree", func(ctx context.Context) (bool, string, error) {
		vols, err := env.Volumes(ctx)
		if err != nil {
			return false, "", err
		}
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		handles, ids := map[string]bool{}, map[string]bool{}
		var orphans, leaked []string
		for _, v := range vols {
			ids[v.ID] = true
		}
		for _, pv := range pvs.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == lab.DriverName {
				handles[pv.Spec.CSI.VolumeHandle] = true
				if !ids[pv.Spec.CSI.VolumeHandle] {
					orphans = append(orphans, pv.Name)
				}
			}
		}
		for _, v := range vols {
			if !handles[v.ID] {
				leaked = append(leaked, v.Name+" ("+v.ID+")")
			}
		}
		return len(orphans) == 0 && len(leaked) == 0, fmt.Sprintf("leaked volumes %v, PVs without a volume %v", leaked, orphans), nil
	})
	vols, err := env.Volumes(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Logf("driver: %d volumes left, 0 leaked, 0 PVs without a volume", len(vols))
}
