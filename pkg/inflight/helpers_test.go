package inflight

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"
)

// claimBuilder builds the claims of the tests.
type claimBuilder struct{ *v1.PersistentVolumeClaim }

// makeClaim is a pending claim apps/<name> of class zonal, UID uid-<name>.
func makeClaim(name string) claimBuilder {
	class := "zonal"
	return claimBuilder{&v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: types.UID("uid-" + name)},
		Spec:       v1.PersistentVolumeClaimSpec{StorageClassName: &class},
	}}
}

func (c claimBuilder) withRecord() claimBuilder {
	c.Finalizers = append(c.Finalizers, Finalizer)
	return c
}

func (c claimBuilder) withSelectedNode(node string) claimBuilder {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[volume.AnnSelectedNode] = node
	return c
}

func (c claimBuilder) deleting() claimBuilder {
	now := metav1.Now()
	c.DeletionTimestamp = &now
	c.Finalizers = append(c.Finalizers, "kubernetes.io/pvc-protection")
	return c
}

// pvOf is a PV that refers to the claim apps/<claim> of uid.
func pvOf(name, claim string, uid types.UID) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: claim, UID: uid}}}
}

// storePVs finds a claim's PVs in a PV informer's store (ClaimVolumes).
type storePVs struct{ informer cache.SharedIndexInformer }

func (s storePVs) Of(uid types.UID) []*v1.PersistentVolume {
	var out []*v1.PersistentVolume
	for _, obj := range s.informer.GetStore().List() {
		if pv := obj.(*v1.PersistentVolume); pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == uid {
			out = append(out, pv)
		}
	}
	return out
}

// fakeVolumes is the core's side for the keeper: volumes by name, deleted
// by Clear; every claim's class is "zonal".
type fakeVolumes struct {
	mu      sync.Mutex
	volumes map[string]bool
	clears  int
}

func newFakeVolumes(names ...string) *fakeVolumes {
	f := &fakeVolumes{volumes: map[string]bool{}}
	for _, n := range names {
		f.volumes[n] = true
	}
	return f
}

func (f *fakeVolumes) VolumeName(claim *v1.PersistentVolumeClaim) string {
	return "pvc-" + string(claim.UID)
}

func (f *fakeVolumes) Class(context.Context, *v1.PersistentVolumeClaim) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "zonal"}, Provisioner: "test.csi.example.com"}
}

func (f *fakeVolumes) Clear(_ context.Context, claim *v1.PersistentVolumeClaim, _ *storagev1.StorageClass) (Outcome, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clears++
	name := f.VolumeName(claim)
	if !f.volumes[name] {
		return OutcomeNothingCreated, "", nil
	}
	delete(f.volumes, name)
	return OutcomeDeleted, "id-" + name, nil
}

func (f *fakeVolumes) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.volumes)
}
