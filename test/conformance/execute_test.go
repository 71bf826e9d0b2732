package conformance

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// pvProtectionFinalizer is the provisioning library's finalizer on the PVs
// it deletes.
const pvProtectionFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"

// execute runs the case on its side up to its outcome (and deletion) and
// returns what it observed, normalised.
func (r *run) execute(ctx context.Context) (map[string]string, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, fmt.Errorf("preparing: %w", err)
	}
	if r.tc.static {
		if err := r.staticPV(ctx); err != nil {
			return nil, err
		}
		// The PV controller must hold the static PV before the claim
		// exists: a claim it syncs first finds no volume and is left to
		// dynamic provisioning, which would make it a second one. It marks
		// a PV reserved for a claim Available once it synced it.
		r.waitFor(ctx, "the PV controller to sync the static PV", func(ctx context.Context) (bool, error) {
			pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, r.ns+"-static", metav1.GetOptions{})
			return err == nil && pv.Status.Phase == v1.VolumeAvailable, err
		})
	}
	pvc, err := env.client.CoreV1().PersistentVolumeClaims(r.ns).Create(ctx, r.claim(), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the claim: %w", err)
	}
	r.uids["data"] = string(pvc.UID)
	if r.tc.podZone != "" {
		if err := r.pod(ctx, "app", "data", r.tc.podZone); err != nil {
			return nil, err
		}
	}
	switch r.tc.want {
	case wantBound:
		if r.waitBound(ctx, "data") {
			r.waitSettled(ctx)
		}
	case wantFailed:
		r.waitFor(ctx, "a Warning Event from the provisioner on the claim", r.warned)
	case wantSettled:
		bound := false
		r.waitFor(ctx, "the claim Bound or a Warning Event on it", func(ctx context.Context) (bool, error) {
			pvc, err := env.client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, "data", metav1.GetOptions{})
			if bound = err == nil && pvc.Status.Phase == v1.ClaimBound; bound {
				return true, nil
			}
			return r.warned(ctx)
		})
		if bound {
			r.waitSettled(ctx)
		}
	case wantIgnored:
		if err := r.sentinel(ctx); err != nil {
			return nil, err
		}
	}
	obs, err := r.observe(ctx, "")
	if err != nil || r.tc.del == nil {
		return obs, err
	}
	if err := r.deleteClaim(ctx); err != nil {
		return nil, err
	}
	after, err := r.observe(ctx, "deleted.")
	for k, v := range after {
		obs[k] = v
	}
	if err != nil || !r.tc.del.attached {
		return obs, err
	}
	if err := r.detach(ctx); err != nil {
		return nil, err
	}
	after, err = r.observe(ctx, "detached.")
	for k, v := range after {
		obs[k] = v
	}
	return obs, err
}

// warned reports whether the provisioner posted a Warning Event on the
// claim.
func (r *run) warned(ctx context.Context) (bool, error) {
	evs, err := r.events(ctx, "PersistentVolumeClaim", "data")
	return slices.ContainsFunc(evs, func(e v1.Event) bool { return e.Type == v1.EventTypeWarning }), err
}

// waitFor polls cond up to caseTimeout; a timeout is recorded (and so shows
// in the diff when only one side times out).
func (r *run) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) bool {
	err := env.cluster.WaitFor(ctx, caseTimeout, func(ctx context.Context) (bool, error) {
		ok, _ := cond(ctx)
		return ok, nil
	})
	if err != nil {
		r.waits = append(r.waits, "timed out waiting for "+what)
		return false
	}
	return true
}

func (r *run) waitBound(ctx context.Context, claim string) bool {
	return r.waitBoundIn(ctx, r.ns, claim)
}

func (r *run) waitBoundIn(ctx context.Context, ns, claim string) bool {
	return r.waitFor(ctx, "claim "+claim+" Bound", func(ctx context.Context) (bool, error) {
		pvc, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err == nil && claim == "data" && pvc.Spec.VolumeName != "" {
			r.pv = pvc.Spec.VolumeName
		}
		return err == nil && pvc.Status.Phase == v1.ClaimBound, err
	})
}

// waitSettled waits, after the claim is Bound, for what the provisioner
// writes asynchronously: the ProvisioningSucceeded Event, or for a static
// PV the provisioner's finalizer on it; with reclaim Retain also until the
// PV has no protection finalizer (the library adds it to every PV it
// creates and removes it from a Retain PV at its next sync).
func (r *run) waitSettled(ctx context.Context) {
	if r.tc.class.reclaim == v1.PersistentVolumeReclaimRetain {
		defer r.waitFor(ctx, "no protection finalizer on the Retain PV", func(ctx context.Context) (bool, error) {
			pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, r.pvName(), metav1.GetOptions{})
			return err == nil && !slices.Contains(pv.Finalizers, pvProtectionFinalizer), err
		})
	}
	if r.tc.static {
		r.waitFor(ctx, "the provisioner's finalizer on the static PV", func(ctx context.Context) (bool, error) {
			pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, r.ns+"-static", metav1.GetOptions{})
			return err == nil && slices.Contains(pv.Finalizers, pvProtectionFinalizer), err
		})
		return
	}
	r.waitFor(ctx, "the ProvisioningSucceeded Event", func(ctx context.Context) (bool, error) {
		evs, err := r.events(ctx, "PersistentVolumeClaim", "data")
		return slices.ContainsFunc(evs, func(e v1.Event) bool { return e.Reason == "ProvisioningSucceeded" }), err
	})
}

// sentinel creates a plain claim of a class of the side's driver after the
// case's claim and waits until it is Bound.
func (r *run) sentinel(ctx context.Context) error {
	name := r.ns + "-sentinel"
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: r.driver()}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = env.client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	}()
	if _, err := env.client.CoreV1().PersistentVolumeClaims(r.ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &name, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	r.waitBound(ctx, "sentinel")
	return nil
}

// deleteClaim deletes the pod, the secrets or class when the case says so,
// and the claim, and waits until the PV is gone, Released with Retain,
// Failed, or has a VolumeFailedDelete Event.
func (r *run) deleteClaim(ctx context.Context) error {
	c := env.client
	pvc, err := c.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pvName := pvc.Spec.VolumeName
	if r.tc.podZone != "" {
		if err := c.CoreV1().Pods(r.ns).Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			return err
		}
	}
	if err := r.beforeDelete(ctx, pvName); err != nil {
		return err
	}
	if r.tc.del.secrets {
		for _, s := range r.tc.secrets {
			if err := c.CoreV1().Secrets(r.ns).Delete(ctx, s, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
	}
	if r.tc.del.class {
		if err := c.StorageV1().StorageClasses().Delete(ctx, r.className(), metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	if err := c.CoreV1().PersistentVolumeClaims(r.ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		return err
	}
	if pvName == "" {
		return nil
	}
	r.waitFor(ctx, "the PV deleted, kept or failed", func(ctx context.Context) (bool, error) {
		pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if isGone(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if pv.Status.Phase == v1.VolumeFailed || (pv.Status.Phase == v1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimRetain) {
			return true, nil
		}
		evs, err := r.events(ctx, "PersistentVolume", pvName)
		for _, e := range evs {
			if e.Reason == "VolumeFailedDelete" {
				return true, err
			}
		}
		return false, err
	})
	return nil
}

// events lists the Events of an object that the provisioner (not
// kube-controller-manager) posted.
func (r *run) events(ctx context.Context, kind, name string) ([]v1.Event, error) {
	ns := r.ns
	if kind == "PersistentVolume" {
		ns = metav1.NamespaceDefault
	}
	list, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []v1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name || e.Source.Component == "persistentvolume-controller" {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// snapshot takes a snapshot of the claim "src" with CreateSnapshot on the
// side's driver, as the snapshotter sidecar would, and creates the
// VolumeSnapshot "snap" and its content, ready to use (no snapshot
// controller runs on the local control plane).
func (r *run) snapshot(ctx context.Context) error {
	src, err := env.client.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, "src", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, src.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return lab.TakeSnapshot(ctx, env.cluster.RESTConfig, r.inst.socket, r.driver(), r.ns, "snap", "src", pv)
}
