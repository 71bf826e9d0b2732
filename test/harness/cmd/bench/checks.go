package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// pvZone returns the zone a PV's node affinity requires ("" without one).
func pvZone(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, req := range term.MatchExpressions {
			if req.Key == lab.ZoneKey && len(req.Values) == 1 {
				return req.Values[0]
			}
		}
	}
	return ""
}

// volumeZone returns the zone of a volume in the mock driver.
func volumeZone(v state.Volume) string {
	if z, ok := v.Segment[lab.ZoneKey]; ok {
		return z
	}
	return v.Segment["zone"]
}

// checkVolumes checks, after a run that provisioned, that the driver has
// exactly the volumes of the cluster's PVs (no leak, no PV without its
// volume), that each PV requires the zone its volume is in, that every claim
// of the run is Bound to one of them, and (wffc) that every pod runs in its
// volume's zone.
func (e *env) checkVolumes(ctx context.Context, r *Result, o *observer, ns string) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	vols, err := e.lab.Volumes(ctx)
	if err != nil {
		fail("listing the driver's volumes: %v", err)
		return
	}
	pvs, err := e.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("listing PVs: %v", err)
		return
	}
	byID := map[string]state.Volume{}
	for _, v := range vols {
		byID[v.ID] = v
	}
	zoneOfClaim := map[string]string{}
	ours := 0
	for _, pv := range pvs.Items {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != lab.DriverName {
			continue
		}
		ours++
		v, ok := byID[pv.Spec.CSI.VolumeHandle]
		if !ok {
			fail("PV %s: volume %s not in the driver", pv.Name, pv.Spec.CSI.VolumeHandle)
			continue
		}
		if z := pvZone(&pv); z == "" || z != volumeZone(v) {
			fail("PV %s requires zone %q, its volume is in %q", pv.Name, z, volumeZone(v))
		}
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns {
			zoneOfClaim[ref.Name] = pvZone(&pv)
		}
	}
	if ours != len(vols) {
		fail("%d PVs of the driver, %d volumes in the driver", ours, len(vols))
	}
	if len(zoneOfClaim) != r.Volumes {
		fail("%d PVs for the run's %d claims", len(zoneOfClaim), r.Volumes)
	}
	o.mu.Lock()
	bound := len(o.bound)
	o.mu.Unlock()
	if bound != r.Volumes {
		fail("%d of %d claims Bound", bound, r.Volumes)
	}
	if r.Scenario == "wffc" {
		e.checkPods(ctx, r, ns, zoneOfClaim)
	}
}

// checkPods checks that each pod of a wffc run is on a node of its volume's
// zone.
func (e *env) checkPods(ctx context.Context, r *Result, ns string, zoneOfClaim map[string]string) {
	pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Failures = append(r.Failures, "listing pods: "+err.Error())
		return
	}
	for _, p := range pods.Items {
		claim := p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
		if z := e.nodes[p.Spec.NodeName]; z != zoneOfClaim[claim] {
			r.Failures = append(r.Failures, fmt.Sprintf("pod %s on %s in zone %q, its volume in %q", p.Name, p.Spec.NodeName, z, zoneOfClaim[claim]))
		}
	}
}

// checkDeleted checks, after the delete run, that neither PVs of the driver
// nor volumes are left.
func (e *env) checkDeleted(ctx context.Context, r *Result) {
	vols, err := e.lab.Volumes(ctx)
	if err != nil {
		r.Failures = append(r.Failures, "listing the driver's volumes: "+err.Error())
		return
	}
	pvs, err := e.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Failures = append(r.Failures, "listing PVs: "+err.Error())
		return
	}
	left := 0
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == lab.DriverName {
			left++
		}
	}
	if left != 0 || len(vols) != 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("after deletion: %d PVs and %d volumes left", left, len(vols)))
	}
}
