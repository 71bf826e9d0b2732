package chaos

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// checkBindings returns the broken binding invariants of the run's claims
// and the driver's PVs: no claim Lost; a Bound claim's PV exists, names it
// (UID included) and is Bound; no PV bound to two claims (two claims with
// the same spec.volumeName); no Bound PV whose claim is bound to another PV;
// no live claim that a PV names without being Bound to it (a binding left
// undone); no PV with reclaim policy Delete left Released (check) or of a
// deleted claim (check). It also counts the Bound claims by the manager of their
// spec.volumeName (csi-provisioner with --bind-through, or
// kube-controller-manager's PV controller).
func checkBindings(pvcs []v1.PersistentVolumeClaim, pvs []v1.PersistentVolume) (problems []string, boundBy map[string]int) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	boundBy = map[string]int{}
	pvByName := map[string]*v1.PersistentVolume{}
	for i := range pvs {
		if pvs[i].Spec.CSI != nil && pvs[i].Spec.CSI.Driver == lab.DriverName {
			pvByName[pvs[i].Name] = &pvs[i]
		}
	}
	claimOf := map[string]string{}
	byUID := map[types.UID]*v1.PersistentVolumeClaim{}
	for i := range pvcs {
		pvc := &pvcs[i]
		byUID[pvc.UID] = pvc
		if pvc.Status.Phase == v1.ClaimLost {
			bad("claim %s Lost (volumeName %q)", pvc.Name, pvc.Spec.VolumeName)
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		if other, ok := claimOf[pvc.Spec.VolumeName]; ok {
			bad("PV %s bound to two claims: %s and %s", pvc.Spec.VolumeName, other, pvc.Name)
		}
		claimOf[pvc.Spec.VolumeName] = pvc.Name
		if pvc.Status.Phase != v1.ClaimBound {
			continue
		}
		boundBy[volumeNameManager(pvc)]++
		pv := pvByName[pvc.Spec.VolumeName]
		switch {
		case pv == nil:
			bad("claim %s Bound to PV %s, which does not exist", pvc.Name, pvc.Spec.VolumeName)
		case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID:
			bad("claim %s Bound to PV %s, which names claim %v (UID %v)", pvc.Name, pv.Name, claimRefName(pv.Spec.ClaimRef), claimRefUID(pv.Spec.ClaimRef))
		case pv.Status.Phase != v1.VolumeBound:
			bad("claim %s Bound to PV %s, which is %s", pvc.Name, pv.Name, pv.Status.Phase)
		}
	}
	for _, pv := range pvByName {
		if pv.Status.Phase != v1.VolumeBound || pv.Spec.ClaimRef == nil {
			continue
		}
		if pvc := byUID[pv.Spec.ClaimRef.UID]; pvc != nil && pvc.Spec.VolumeName != "" && pvc.Spec.VolumeName != pv.Name {
			bad("PV %s Bound to claim %s, which is bound to PV %s", pv.Name, pvc.Name, pvc.Spec.VolumeName)
		}
	}
	for _, pv := range pvByName {
		if pv.Spec.ClaimRef == nil || pv.DeletionTimestamp != nil {
			continue
		}
		pvc := byUID[pv.Spec.ClaimRef.UID]
		if pvc != nil && pvc.DeletionTimestamp == nil && (pvc.Spec.VolumeName != pv.Name || pvc.Status.Phase != v1.ClaimBound) {
			bad("binding left undone: PV %s (%s) names claim %s, which is %s with volumeName %q", pv.Name, pv.Status.Phase, pvc.Name, pvc.Status.Phase, pvc.Spec.VolumeName)
		}
	}
	return problems, boundBy
}

// volumeNameManager is the field manager that owns the claim's
// spec.volumeName: who bound it.
func volumeNameManager(pvc *v1.PersistentVolumeClaim) string {
	for _, m := range pvc.ManagedFields {
		if m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:volumeName"`) {
			return m.Manager
		}
	}
	return "unknown"
}

func claimRefUID(ref *v1.ObjectReference) types.UID {
	if ref == nil {
		return ""
	}
	return ref.UID
}

// countsOf returns "a 2, b 1" for a map of counts, sorted by key.
func countsOf(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
