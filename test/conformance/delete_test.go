package conformance

import (
	"context"
	"encoding/json"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Deletion-secret annotations the provisioners put on a PV whose class
// names a provisioner secret.
const (
	annDeletionSecretName      = "volume.kubernetes.io/provisioner-deletion-secret-name"
	annDeletionSecretNamespace = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
)

// beforeDelete prepares the PV's deletion as the case's deleteSpec says:
// it strips the PV's deletion-secret annotations, or attaches the PV.
func (r *run) beforeDelete(ctx context.Context, pvName string) error {
	if pvName == "" {
		return nil
	}
	if r.tc.del.stripSecretAnnotations {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			annDeletionSecretName: nil, annDeletionSecretNamespace: nil}}})
		if err != nil {
			return err
		}
		if _, err := env.client.CoreV1().PersistentVolumes().Patch(ctx, pvName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("removing the deletion-secret annotations of %s: %w", pvName, err)
		}
	}
	if r.tc.del.attached {
		return r.attach(ctx, pvName)
	}
	return nil
}

// attach creates the VolumeAttachment "<ns>-va" of the PV on node-z1 with
// the side's driver as attacher, and marks it attached, as
// kube-controller-manager and the external-attacher would for a pod on the
// node (none runs here). cleanup deletes it.
func (r *run) attach(ctx context.Context, pvName string) error {
	va, err := env.client.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-va"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: r.driver(), NodeName: "node-z1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("attaching %s: %w", pvName, err)
	}
	va.Status.Attached = true
	if _, err := env.client.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking %s attached: %w", va.Name, err)
	}
	return nil
}

// detach deletes the case's VolumeAttachment and waits until the PV is
// gone.
func (r *run) detach(ctx context.Context) error {
	if err := env.client.StorageV1().VolumeAttachments().Delete(ctx, r.ns+"-va", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("detaching: %w", err)
	}
	pvName := r.pvName()
	r.waitFor(ctx, "the PV deleted after the detach", func(ctx context.Context) (bool, error) {
		_, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return isGone(err), nil
	})
	return nil
}
