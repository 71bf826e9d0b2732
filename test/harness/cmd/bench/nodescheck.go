package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// watchCounts are the API server's watch counters for claims and PVs.
type watchCounts struct {
	// sent are the events sent to watchers, one per event and watcher
	// (apiserver_watch_events_total).
	sent int64
	// dispatched are the events the watch cache dispatched, one per event
	// (apiserver_watch_cache_events_dispatched_total).
	dispatched int64
}

// watchCounts reads the API server's watch counters of claims and PVs.
func (e *env) watchCounts(ctx context.Context) (watchCounts, error) {
	var w watchCounts
	data, err := e.cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return w, fmt.Errorf("the API server's /metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var counter *int64
		switch {
		case strings.HasPrefix(line, "apiserver_watch_events_total{"):
			counter = &w.sent
		case strings.HasPrefix(line, "apiserver_watch_cache_events_dispatched_total{"):
			counter = &w.dispatched
		default:
			continue
		}
		if !strings.Contains(line, `resource="persistentvolumeclaims"`) && !strings.Contains(line, `resource="persistentvolumes"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return w, fmt.Errorf("the API server's /metrics: %q: %w", line, err)
		}
		*counter += int64(v)
	}
	return w, sc.Err()
}

// isCentral reports whether a nodes run is the central reference.
func isCentral(r *Result) bool { return strings.HasPrefix(r.Deployment, "central") }

// checkFleetVolumes checks, once a nodes run's claims are Bound, that
// every claim is Bound, that each PV of the run requires the node its
// claim was selected for and names a volume of that node's driver (the
// central driver for the reference), that each driver holds exactly the
// volumes of its node's claims, and that the provisioners created exactly
// one PV per claim.
func (e *env) checkFleetVolumes(ctx context.Context, r *Result, o *observer, f *fleet, ns string) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	n := r.Volumes
	drivers := f.drivers
	if isCentral(r) {
		drivers = []*driver.Driver{f.central}
	}
	handles := make([]map[string]bool, len(drivers))
	for j, d := range drivers {
		handles[j] = map[string]bool{}
		for _, v := range d.Volumes() {
			handles[j][v.ID] = true
		}
	}
	pvs, err := e.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		fail("listing PVs: %v", err)
		return
	}
	perNode := make([]int, len(f.nodes))
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Namespace != ns {
			continue
		}
		i := claimIndex(pv.Spec.ClaimRef.Name)
		if i < 0 || pv.Spec.CSI == nil {
			fail("PV %s: claim %s, CSI source %v", pv.Name, pv.Spec.ClaimRef.Name, pv.Spec.CSI)
			continue
		}
		j := i % len(f.nodes)
		perNode[j]++
		if got := pvNode(&pv); got != f.nodes[j] {
			fail("PV %s requires node %q, want %q", pv.Name, got, f.nodes[j])
		}
		if d := min(j, len(drivers)-1); !handles[d][pv.Spec.CSI.VolumeHandle] {
			fail("PV %s: volume %s not in the driver of node %s", pv.Name, pv.Spec.CSI.VolumeHandle, f.nodes[j])
		}
	}
	for j := range f.nodes {
		want := n / len(f.nodes)
		if j < n%len(f.nodes) {
			want++
		}
		if perNode[j] != want {
			fail("node %s: %d PVs, want %d", f.nodes[j], perNode[j], want)
		}
		if !isCentral(r) && len(handles[j]) != want {
			fail("node %s: %d volumes in its driver, want %d", f.nodes[j], len(handles[j]), want)
		}
	}
	if isCentral(r) && len(handles[0]) != n {
		fail("%d volumes in the central driver, want %d", len(handles[0]), n)
	}
	if _, _, bound, _ := o.counts(); bound != n {
		fail("%d of %d claims Bound", bound, n)
	}
	if got := r.Requests["create persistentvolumes"]; got != n {
		fail("the provisioners created %d PVs, want %d", got, n)
	}
}

// cleanUpNodes deletes a nodes run's claims, waits until their PVs are
// gone with the run's provisioners still running, and checks that no
// driver holds a volume any more.
func (e *env) cleanUpNodes(ctx context.Context, r *Result, o *observer, f *fleet, ns string, procs []*controlplane.Process) error {
	added, _, _, _ := o.counts()
	if _, err := e.deleteClaims(ctx, ns, e.opts.Claims); err != nil {
		return err
	}
	alive := func() error { return exitedOne(procs) }
	if err := o.waitUntil(ctx, e.runTimeout(), alive, func(_, gone, _, _ int) bool { return gone >= added }); err != nil {
		return fmt.Errorf("cleaning up %s: %w", ns, err)
	}
	left := 0
	for _, d := range append(append([]*driver.Driver(nil), f.drivers...), f.central) {
		if d != nil {
			left += len(d.Volumes())
		}
	}
	if left != 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("after the run's claims were deleted: %d volumes left in the drivers", left))
	}
	return nil
}
