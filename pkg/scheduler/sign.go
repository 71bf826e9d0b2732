package scheduler

import (
	"fmt"
	"slices"
)

// Signature lists, sorted, everything Filter and Score read of the pod's
// volumes of the driver: each pending claim by namespace/name and UID with
// its class, request and data source (where the source is reachable from),
// and each bound volume by PV name. With the cluster state, that is all
// they depend on: two pods with equal signatures get the same verdict and
// score on every node. They stay equal after one of them is reserved: the
// only pods with equal signatures share the same claims, and a pod never
// counts its own claims' reservations (Ledger.Reserved, Ledger.InFlight).
// The plugin's SignPod hands it to kube-scheduler's pod-signature batching.
func (podVols *PodVolumes) Signature() []string {
	if podVols == nil {
		return nil
	}
	out := make([]string, 0, len(podVols.Pending)+len(podVols.Bound))
	for _, p := range podVols.Pending {
		source := ""
		if p.Source != nil {
			source = p.Source.Message
		}
		out = append(out, fmt.Sprintf("pending %s/%s uid=%s class=%s bytes=%d source=%q",
			p.Claim.Namespace, p.Claim.Name, p.Claim.UID, p.Class.Name, p.Bytes, source))
	}
	for _, v := range podVols.Bound {
		out = append(out, "bound "+v.Name)
	}
	slices.Sort(out)
	return out
}
