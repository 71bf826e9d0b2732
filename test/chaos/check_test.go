package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// figures are the invariants' figures at the end of a run.
type figures struct {
	claims, bound, deleted, pending int
	volumes, pvs                    int
	// boundBy counts the Bound claims by the manager of their
	// spec.volumeName: who bound them.
	boundBy              map[string]int
	goroutines, baseline int
	problems             []string
}

// check evaluates the invariants from fresh lists of the API and the
// driver: volumes in the driver == PVs of the driver; every claim Bound, or
// deleted with its volume gone, or Pending with an Event; no claim with two
// volumes or two PVs; no claim Terminating; no PV Released with reclaim
// Delete; the binding invariants (checkBindings); the leader's goroutines
// back to baseline.
func (r *chaosRun) check(ctx context.Context, baseline int) figures {
	f := figures{baseline: baseline}
	bad := func(format string, args ...any) { f.problems = append(f.problems, fmt.Sprintf(format, args...)) }
	pvcs, err := client.CoreV1().PersistentVolumeClaims(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		bad("listing claims: %v", err)
		return f
	}
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		bad("listing PVs: %v", err)
		return f
	}
	vols, err := env.Volumes(ctx)
	if err != nil {
		bad("listing the driver's volumes: %v", err)
		return f
	}
	events, err := client.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		bad("listing events: %v", err)
		return f
	}

	// Volumes and PVs of the driver, both ways.
	volByID := map[string]string{}
	volsByName := map[string][]string{}
	for _, v := range vols {
		volByID[v.ID] = v.Name
		volsByName[v.Name] = append(volsByName[v.Name], v.ID)
	}
	f.volumes = len(vols)
	pvByHandle := map[string]string{}
	pvsByClaim := map[types.UID][]string{}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != lab.DriverName {
			continue
		}
		f.pvs++
		pvByHandle[pv.Spec.CSI.VolumeHandle] = pv.Name
		if _, ok := volByID[pv.Spec.CSI.VolumeHandle]; !ok {
			bad("PV %s (%s) has no volume %s in the driver", pv.Name, pv.Status.Phase, pv.Spec.CSI.VolumeHandle)
		}
		if pv.Spec.ClaimRef != nil {
			pvsByClaim[pv.Spec.ClaimRef.UID] = append(pvsByClaim[pv.Spec.ClaimRef.UID], pv.Name)
		}
		if pv.Status.Phase == v1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete {
			bad("PV %s Released with reclaim policy Delete (claim %v)", pv.Name, claimRefName(pv.Spec.ClaimRef))
		}
	}
	for _, v := range vols {
		if _, ok := pvByHandle[v.ID]; !ok {
			bad("LEAK: driver volume %s (name %s) has no PV", v.ID, v.Name)
		}
	}
	for name, ids := range volsByName {
		if len(ids) > 1 {
			bad("driver has %d volumes named %s: %v", len(ids), name, ids)
		}
	}
	for uid, names := range pvsByClaim {
		if len(names) > 1 {
			bad("claim %s has %d PVs: %v", uid, len(names), names)
		}
	}

	// Every claim of the run.
	live := map[string]*v1.PersistentVolumeClaim{}
	for i := range pvcs.Items {
		live[pvcs.Items[i].Name] = &pvcs.Items[i]
	}
	why := map[types.UID][]string{}
	for _, e := range events.Items {
		why[e.InvolvedObject.UID] = append(why[e.InvolvedObject.UID], e.Reason+": "+e.Message)
	}
	r.mu.Lock()
	claims := make([]*claim, 0, len(r.claims))
	for _, c := range r.claims {
		claims = append(claims, c)
	}
	r.mu.Unlock()
	f.claims = len(claims)
	for _, c := range claims {
		pvc := live[c.name]
		if pvc != nil && pvc.UID != c.uid {
			pvc = nil
		}
		volName := "pvc-" + string(c.uid)
		switch {
		case pvc == nil:
			if !c.deleted {
				bad("claim %s (%s) gone, but the run never deleted it", c.name, c.uid)
			}
			if ids := volsByName[volName]; len(ids) > 0 {
				bad("LEAK: claim %s deleted, its volume %s (%v) stays", c.name, volName, ids)
			}
			if names := pvsByClaim[c.uid]; len(names) > 0 {
				bad("claim %s deleted, its PV %v stays", c.name, names)
			}
			f.deleted++
		case pvc.DeletionTimestamp != nil:
			bad("claim %s stuck Terminating since %s, finalizers %v, events %q", c.name, pvc.DeletionTimestamp.Format(time.TimeOnly), pvc.Finalizers, why[c.uid])
		case pvc.Status.Phase == v1.ClaimBound:
			f.bound++
			if ids := volsByName[volName]; len(ids) != 1 {
				bad("bound claim %s has %d volumes named %s", c.name, len(ids), volName)
			}
		default:
			f.pending++
			if len(why[c.uid]) == 0 {
				bad("claim %s %s without an Event that says why (selected node %q)", c.name, pvc.Status.Phase, pvc.Annotations[annSelectedNode])
			}
		}
	}
	bindProblems, boundBy := checkBindings(pvcs.Items, pvs.Items)
	f.problems = append(f.problems, bindProblems...)
	f.boundBy = boundBy
	f.goroutines = r.goroutines()
	if f.goroutines < 0 {
		bad("no replica leads: goroutines unknown")
	} else if f.goroutines > baseline+goroutineSlack {
		bad("the leader has %d goroutines, baseline %d (+%d allowed)", f.goroutines, baseline, goroutineSlack)
	}
	return f
}

func claimRefName(ref *v1.ObjectReference) string {
	if ref == nil {
		return "none"
	}
	return ref.Namespace + "/" + ref.Name
}

// summary logs the seed, the fault counts and the invariants' figures.
func (r *chaosRun) summary(f figures, total, settled time.Duration) {
	r.mu.Lock()
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary: seed %d, %d claims over %s, full %t, bind-through %t\n", r.seed, *claimsFlag, *durationFlag, *fullFlag, *bindFlag)
	for _, k := range keys {
		fmt.Fprintf(&b, "  fault/action %-62s %d\n", k, r.counts[k])
	}
	r.mu.Unlock()
	late, cut := slowCalls()
	fmt.Fprintf(&b, "  fault/action %-62s %d\n", "CreateVolume outlasting --timeout, carried out after", late)
	fmt.Fprintf(&b, "  fault/action %-62s %d\n", "CreateVolume outlasting --timeout, cancelled", cut)
	fmt.Fprintf(&b, "  claims %d: bound %d, deleted (volume gone) %d, pending with an Event %d\n", f.claims, f.bound, f.deleted, f.pending)
	fmt.Fprintf(&b, "  driver volumes %d, PVs of the driver %d\n", f.volumes, f.pvs)
	fmt.Fprintf(&b, "  bound claims by who bound them (bind-through %t): %s\n", *bindFlag, countsOf(f.boundBy))
	fmt.Fprintf(&b, "  leader goroutines %d (baseline %d)\n", f.goroutines, f.baseline)
	fmt.Fprintf(&b, "  duration %s (settled %s after the faults stopped), broken invariants %d\n", total.Round(time.Second), settled.Round(time.Second), len(f.problems))
	r.t.Log(b.String())
}

// slowCalls counts, in the mock controller's log (all its runs), the
// CreateVolume calls that a fault held beyond --timeout: carried out after
// their caller gave up, and cut short by the caller's end.
func slowCalls() (late, cut int) {
	data, err := os.ReadFile(env.ControllerLogPath())
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "CreateVolume") {
			continue
		}
		switch {
		case strings.Contains(line, "CSI call delayed"):
			late++
		case strings.Contains(line, "CSI fault injected"):
			cut++
		}
	}
	return late, cut
}
