package e2ebind

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	gi = int64(1) << 30
	// pvBinder is the user agent suffix of the PV controller's client.
	pvBinder = "persistent-volume-binder"
	// provisionerUser is csi-provisioner's ServiceAccount in the lab.
	provisionerUser = "system:serviceaccount:csi-topology:csi-provisioner"
	annBoundBy      = "pv.kubernetes.io/bound-by-controller"
	annCompleted    = "pv.kubernetes.io/bind-completed"
)

// TestBindThroughWithoutThePVController kills kube-controller-manager while
// the CreateVolume calls of delayed claims (with pods) and immediate claims
// are in flight (the mock driver answers them after a few seconds; the PV
// controller has already marked the claims for csi-provisioner):
// csi-provisioner binds every one, and the pods are scheduled, with no PV
// controller running. Once kube-controller-manager is back and its PV
// controller has bound a pre-bound witness PV (so it has synced every claim
// before it), the audit log shows that the PV controller wrote nothing for
// our claims and PVs since, nor any status of theirs ever, and our claims
// and PVs read as the witness's: what the PV controller writes.
func TestBindThroughWithoutThePVController(t *testing.T) {
	c := env.Cluster
	ctx, ns := env.TestNamespaceWithClass(t, "wffc")
	immediate := lab.NewClass(t, ctx, c, ns+"-now", lab.ClassOptions{Immediate: true})
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Latency: faults.Duration(8 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("late-%d", i)
		env.ClaimAndPod(t, ctx, ns, ns, name, gi, "")
		names = append(names, name)
	}
	for i := range 3 {
		name := fmt.Sprintf("now-%d", i)
		lab.NewClaim(t, ctx, c, ns, name, immediate, gi)
		names = append(names, name)
	}
	waitMarkedForProvisioner(t, ctx, c, ns, names)
	c.StopControllerManager()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = c.StartControllerManager(context.WithoutCancel(ctx))
		}
	})
	if n := boundNow(t, ctx, c, ns); n > 0 {
		t.Fatalf("%d claims were Bound before kube-controller-manager was stopped: CreateVolume was not slow enough for the test", n)
	}
	pvs := map[string]bool{}
	for _, name := range names {
		pvs[lab.WaitBound(t, ctx, c, ns, name).Name] = true
	}
	for i := range 3 {
		env.WaitPlaced(t, ctx, ns, fmt.Sprintf("late-%d", i))
	}

	since := time.Now()
	if err := c.StartControllerManager(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	witness := witnessBinding(t, ctx, c, ns)
	writes := bindingWrites(t, c, ns, pvs, since)
	if got := writes[pvBinder]; len(got) != 0 {
		t.Errorf("the PV controller wrote %d times for claims bind-through completed, want none: %v", len(got), got)
	}
	if got := writes["witness"]; len(got) == 0 {
		t.Errorf("no write of the PV controller for the witness in the audit log: the count above cannot be trusted")
	}
	if got, want := len(writes[provisionerUser]), 3*len(names); got != want {
		t.Errorf("csi-provisioner made %d binding writes, want %d (PV status, claim, claim status per claim): %v", got, want, writes[provisionerUser])
	}
	// Each claim's in-flight record went in its binding write: one patch
	// (the record added) and one update (the binding) each, no removal of
	// the keeper's own.
	patches, updates := claimWrites(t, c, ns)
	for _, name := range names {
		if patches[name] != 1 || updates[name] != 1 {
			t.Errorf("claim %s: %d patches and %d updates by csi-provisioner, want 1 (the record added) and 1 (bound, the record removed)",
				name, patches[name], updates[name])
		}
		sameAsPVController(t, ctx, c, ns, name, witness)
	}
}

// waitMarkedForProvisioner waits until the PV controller has marked each
// claim for the driver's provisioner (volume.kubernetes.io/storage-provisioner),
// which the provisioning library waits for.
func waitMarkedForProvisioner(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string, names []string) {
	t.Helper()
	for _, name := range names {
		if err := c.WaitFor(ctx, lab.WorkloadTimeout, func(ctx context.Context) (bool, error) {
			pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && pvc.Annotations["volume.kubernetes.io/storage-provisioner"] == lab.DriverName, nil
		}); err != nil {
			t.Fatalf("claim %s/%s never marked for %s: %v\n%s", ns, name, lab.DriverName, err, lab.Describe(ctx, c, ns))
		}
	}
}

// boundNow counts the Bound claims of ns.
func boundNow(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) int {
	t.Helper()
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pvc := range claims.Items {
		if pvc.Status.Phase == v1.ClaimBound {
			n++
		}
	}
	return n
}

// witnessBinding creates a PV pre-bound to a claim without a class, which
// only the PV controller binds, waits until it is Bound and returns it.
func witnessBinding(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns string) *v1.PersistentVolumeClaim {
	t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-witness"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(gi, resource.BinarySI)},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: ns, Name: "witness"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "witness.example.com", VolumeHandle: ns}},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumes().Delete(context.WithoutCancel(ctx), pv.Name, metav1.DeleteOptions{})
	})
	lab.NewClaim(t, ctx, c, ns, "witness", "", gi, func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.StorageClassName = ptr.To("") })
	lab.WaitBound(t, ctx, c, ns, "witness")
	claim, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "witness", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// bindingWrites reads the audit log's successful writes of the claims of ns
// and of the PVs in pvs (and the witness's), by writer: the PV controller
// (pvBinder: its status writes, and every write since since; its mark for
// the provisioner comes before), csi-provisioner (provisionerUser: its
// updates of statuses and claims; its PV creates and finalizer patches are
// no binding writes) and, apart, the PV controller's writes of the witness
// ("witness").
func bindingWrites(t *testing.T, c *controlplane.Cluster, ns string, pvs map[string]bool, since time.Time) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := controlplane.ReadAuditLog(c.AuditLog, func(e controlplane.AuditEvent) {
		ref := e.ObjectRef
		if ref == nil || e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 || (e.Verb != "update" && e.Verb != "patch") {
			return
		}
		ours := (ref.Resource == "persistentvolumeclaims" && ref.Namespace == ns) || (ref.Resource == "persistentvolumes" && pvs[ref.Name])
		witness := ref.Name == "witness" || ref.Name == ns+"-witness"
		what := e.Verb + " " + ref.Resource + "/" + ref.Subresource + " " + ref.Name
		switch {
		case witness && strings.Contains(e.UserAgent, pvBinder):
			out["witness"] = append(out["witness"], what)
		case ours && strings.Contains(e.UserAgent, pvBinder) && (ref.Subresource == "status" || e.RequestReceived.After(since)):
			out[pvBinder] = append(out[pvBinder], what)
		case ours && !witness && e.User.Username == provisionerUser && e.Verb == "update" &&
			(ref.Subresource == "status" || ref.Resource == "persistentvolumeclaims"):
			out[provisionerUser] = append(out[provisionerUser], what)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// binding is what a binding writes on a claim and its PV, with names left
// out, to compare a claim bound by csi-provisioner with the witness.
type binding struct {
	Annotations map[string]string
	Status      v1.PersistentVolumeClaimStatus
	VolumePhase v1.PersistentVolumePhase
	VolumeMsg   string
	Transition  bool
}

func bindingOf(t *testing.T, ctx context.Context, c *controlplane.Cluster, claim *v1.PersistentVolumeClaim) binding {
	t.Helper()
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		t.Errorf("PV %s does not name claim %s/%s (UID %s): %+v", pv.Name, claim.Namespace, claim.Name, claim.UID, pv.Spec.ClaimRef)
	}
	b := binding{Annotations: map[string]string{}, Status: claim.Status, VolumePhase: pv.Status.Phase,
		VolumeMsg: pv.Status.Message, Transition: pv.Status.LastPhaseTransitionTime != nil}
	for _, k := range []string{annBoundBy, annCompleted} {
		if v, ok := claim.Annotations[k]; ok {
			b.Annotations[k] = v
		}
	}
	if !cmp.Equal(claim.Status.Capacity, pv.Spec.Capacity) {
		t.Errorf("claim %s/%s capacity %v, its PV's %v", claim.Namespace, claim.Name, claim.Status.Capacity, pv.Spec.Capacity)
	}
	b.Status.Capacity = nil
	return b
}

// sameAsPVController compares the claim's binding with the witness's.
func sameAsPVController(t *testing.T, ctx context.Context, c *controlplane.Cluster, ns, name string, witness *v1.PersistentVolumeClaim) {
	t.Helper()
	claim, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bindingOf(t, ctx, c, witness), bindingOf(t, ctx, c, claim)); diff != "" {
		t.Errorf("claim %s/%s bound by csi-provisioner differs from the PV controller's binding (-PV controller +ours):\n%s", ns, name, diff)
	}
}
