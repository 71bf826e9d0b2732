package conformance

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Data sources in another namespace: the API server runs with the
// CrossNamespaceVolumeDataSource gate (it drops dataSourceRef.namespace
// without it), serves ReferenceGrant, and profileXNS runs upstream with
// its gate (ours refuses the gate at start: it does not support such
// sources, and says so in a Warning Event).
const crossNamespaceGate = "--feature-gates=CrossNamespaceVolumeDataSource=true"

// crossNSSpec makes the case's source claim "src" in the namespace
// <ns>-src, of the case's class, and with grant a ReferenceGrant there
// that lets the case's namespace's claims refer to it.
type crossNSSpec struct {
	grant bool
}

// crossNamespaceCases: a clone of a claim in another namespace, with and
// without a ReferenceGrant, with both provisioners' gates on (upstream's)
// and off.
func crossNamespaceCases() []tcase {
	other := &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src", Namespace: ptr.To("{ns}-src")}
	missing := &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src", Namespace: ptr.To("default")}
	return []tcase{
		{name: "source/cross-namespace-gate-off", want: wantFailed, claim: claimSpec{ref: missing}},
		{name: "source/cross-namespace-granted", profile: profileXNS, want: wantSettled, claim: claimSpec{ref: other},
			crossNS: &crossNSSpec{grant: true}},
		{name: "source/cross-namespace-not-granted", profile: profileXNS, want: wantSettled, claim: claimSpec{ref: other},
			crossNS: &crossNSSpec{}},
	}
}

// sourceNamespace is the namespace of a cross-namespace case's source.
func (r *run) sourceNamespace() string { return r.ns + "-src" }

// prepareCrossNS creates the source namespace, its claim "src" (Bound) and
// the ReferenceGrant the case asks for.
func (r *run) prepareCrossNS(ctx context.Context) error {
	ns := r.sourceNamespace()
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := r.sourceClaimIn(ctx, ns); err != nil {
		return err
	}
	if !r.tc.crossNS.grant {
		return nil
	}
	grant := fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: claims-of-%s
  namespace: %s
spec:
  from:
  - group: ""
    kind: PersistentVolumeClaim
    namespace: %s
  to:
  - group: ""
    kind: PersistentVolumeClaim
`, r.ns, ns, r.ns)
	return env.cluster.ApplyYAML(ctx, []byte(grant), false)
}
