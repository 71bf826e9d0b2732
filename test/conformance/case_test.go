package conformance

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// outcome is what a case waits for on each side before it records.
type outcome string

const (
	// wantBound waits until the claim is Bound.
	wantBound outcome = "bound"
	// wantFailed waits until the provisioner posted a Warning Event on the
	// claim.
	wantFailed outcome = "failed"
	// wantIgnored waits until a plain claim created after the case's claim
	// is Bound (the provisioner has worked through its queue), for claims a
	// provisioner must leave alone.
	wantIgnored outcome = "ignored"
	// wantSettled waits until the claim is Bound or the provisioner
	// posted a Warning Event on it, for a case whose sides differ in that.
	wantSettled outcome = "settled"
)

// source is a data source a case prepares before its claim.
type source string

const (
	sourceNone     source = ""
	sourceClone    source = "pvc"
	sourceSnapshot source = "snapshot"
)

// classSpec is the case's StorageClass; "{ns}" in parameter values is the
// side's namespace of the case.
type classSpec struct {
	params       map[string]string
	mountOptions []string
	reclaim      v1.PersistentVolumeReclaimPolicy
	wffc         bool
	allowedZones []string
	// provisioner replaces the side's driver name (an in-tree plugin name).
	provisioner string
	// zoneLabel is the key of allowedZones; zoneKey when empty.
	zoneLabel string
}

// claimSpec is the case's claim "data".
type claimSpec struct {
	accessModes    []v1.PersistentVolumeAccessMode
	block          bool
	request, limit string
	annotations    map[string]string
	// source prepares a data source and points dataSource at it.
	source source
	// useRef puts the source in dataSourceRef instead of dataSource.
	useRef bool
	// ref is a dataSourceRef to something that is neither a claim nor a
	// snapshot (a populator's kind), or in another namespace.
	ref *v1.TypedObjectReference
	// vac names a VolumeAttributesClass: "vac" is the case's class (see
	// tcase.vac), other names do not exist.
	vac string
}

// deleteSpec deletes the claim after the outcome, and waits until its PV
// is gone, Released with reclaim Retain, or failed to delete.
type deleteSpec struct {
	// secrets deletes the case's secrets first; class deletes the
	// StorageClass first.
	secrets, class bool
	// stripSecretAnnotations removes the PV's deletion-secret annotations
	// first (a PV provisioned before they existed): the secret is then
	// taken from the class.
	stripSecretAnnotations bool
	// attached creates a VolumeAttachment of the PV (on node-z1, attached)
	// first, as if a pod on the node still used the volume.
	attached bool
}

// tcase is one case of the corpus, run once per side.
type tcase struct {
	name    string
	profile profile
	class   classSpec
	claim   claimSpec
	// secrets are created in the case's namespace with keys "user" and
	// "password".
	secrets []string
	// podZone, when set, places a pod using the claim on node-<podZone>
	// (a WaitForFirstConsumer claim gets that node selected).
	podZone string
	// vac creates the case's VolumeAttributesClass "<ns>-vac" for the
	// side's driver with these parameters.
	vac  map[string]string
	want outcome
	del  *deleteSpec
	// static binds the claim to a pre-made PV of the side's driver that no
	// provisioner made (no provisioned-by annotation).
	static bool
	// crossNS puts the case's source in another namespace (crossns_test.go).
	crossNS *crossNSSpec
}

// run is one case on one side: its namespace (also the names of its class
// and VolumeAttributesClass) and the instance serving it.
type run struct {
	tc    tcase
	side  side
	ns    string
	inst  *instance
	uids  map[string]string // claim name -> UID
	waits []string          // conditions that timed out
	// lastSeq is the driver's last call the previous observation saw.
	lastSeq int64
	// pv is the name of the claim's PV once it was seen bound.
	pv string
}

func (r *run) driver() string { return r.inst.driver }

// profile is the case's profile (profileDefault when unset).
func (r *run) profile() profile {
	if r.tc.profile == "" {
		return profileDefault
	}
	return r.tc.profile
}

// pvName is the claim's PV: the one it was seen bound to, else the static
// PV, else the name both provisioners give it (the CSI volume name of
// the claim, pvc-<UID> without --volume-name-prefix).
func (r *run) pvName() string {
	switch {
	case r.pv != "":
		return r.pv
	case r.tc.static:
		return r.ns + "-static"
	}
	return volumeName(r.profile(), r.uids["data"])
}

func (r *run) className() string { return r.ns }

// prepare creates the namespace, secrets, VolumeAttributesClass, class and
// data source of the case.
func (r *run) prepare(ctx context.Context) error {
	c := env.client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, name := range r.tc.secrets {
		if _, err := c.CoreV1().Secrets(r.ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"user": "admin", "password": "s3cret-" + name}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if r.tc.vac != nil {
		if _, err := c.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
			ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-vac"}, DriverName: r.driver(), Parameters: r.tc.vac,
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := c.StorageV1().StorageClasses().Create(ctx, r.storageClass(), metav1.CreateOptions{}); err != nil {
		return err
	}
	if r.tc.crossNS != nil {
		return r.prepareCrossNS(ctx)
	}
	switch r.tc.claim.source {
	case sourceClone:
		return r.sourceClaim(ctx)
	case sourceSnapshot:
		if err := r.sourceClaim(ctx); err != nil {
			return err
		}
		return r.snapshot(ctx)
	}
	return nil
}

func (r *run) storageClass() *storagev1.StorageClass {
	cs := r.tc.class
	mode := storagev1.VolumeBindingImmediate
	if cs.wffc {
		mode = storagev1.VolumeBindingWaitForFirstConsumer
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if cs.reclaim != "" {
		reclaim = cs.reclaim
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: r.className()}, Provisioner: r.driver(),
		VolumeBindingMode: &mode, ReclaimPolicy: &reclaim, MountOptions: cs.mountOptions, Parameters: map[string]string{}}
	if cs.provisioner != "" {
		sc.Provisioner = cs.provisioner
	}
	for k, v := range cs.params {
		sc.Parameters[k] = strings.ReplaceAll(v, "{ns}", r.ns)
	}
	if len(cs.allowedZones) > 0 {
		key := zoneKey
		if cs.zoneLabel != "" {
			key = cs.zoneLabel
		}
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: key, Values: cs.allowedZones}}}}
	}
	return sc
}

// claim returns the case's claim "data".
func (r *run) claim() *v1.PersistentVolumeClaim {
	cs := r.tc.claim
	modes := cs.accessModes
	if len(modes) == 0 {
		modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	req := cs.request
	if req == "" {
		req = "1Gi"
	}
	class := r.className()
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: r.ns, Annotations: cs.annotations},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: modes,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(req)}}},
	}
	if cs.limit != "" {
		pvc.Spec.Resources.Limits = v1.ResourceList{v1.ResourceStorage: resource.MustParse(cs.limit)}
	}
	if cs.block {
		pvc.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	}
	if cs.vac == "vac" {
		pvc.Spec.VolumeAttributesClassName = ptr.To(r.ns + "-vac")
	} else if cs.vac != "" {
		pvc.Spec.VolumeAttributesClassName = ptr.To(cs.vac)
	}
	var ref *v1.TypedObjectReference
	switch cs.source {
	case sourceClone:
		ref = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
	case sourceSnapshot:
		ref = &v1.TypedObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}
	}
	if cs.ref != nil {
		ref = cs.ref.DeepCopy()
		if ref.Namespace != nil {
			ref.Namespace = ptr.To(strings.ReplaceAll(*ref.Namespace, "{ns}", r.ns))
		}
	}
	if ref != nil && (cs.useRef || cs.ref != nil) {
		pvc.Spec.DataSourceRef = ref
	} else if ref != nil {
		pvc.Spec.DataSource = &v1.TypedLocalObjectReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
	}
	return pvc
}

// sourceClaim creates the claim "src" of the case's class and waits until
// it is Bound.
func (r *run) sourceClaim(ctx context.Context) error { return r.sourceClaimIn(ctx, r.ns) }

// sourceClaimIn creates the claim "src" of the case's class in namespace
// ns and waits until it is Bound.
func (r *run) sourceClaimIn(ctx context.Context, ns string) error {
	class := r.className()
	src := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "src", Namespace: ns},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if r.tc.claim.block {
		src.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	}
	src, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, src, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	r.uids["src"] = string(src.UID)
	if r.tc.class.wffc {
		if err := r.pod(ctx, "src-user", "src", r.sourceZone()); err != nil {
			return err
		}
	}
	if !r.waitBoundIn(ctx, ns, "src") {
		return fmt.Errorf("source claim %s/src not bound", ns)
	}
	return nil
}

// sourceZone is where the pod of a delayed-binding source claim runs: z1,
// or the zone of the profile's pods.
func (r *run) sourceZone() string {
	if z := profiles[r.profile()].podZone; z != "" {
		return z
	}
	return "z1"
}

// pod creates a pod on node-<zone> that uses claim.
func (r *run) pod(ctx context.Context, name, claim, zone string) error {
	if err := env.cluster.WaitFor(ctx, caseTimeout, func(ctx context.Context) (bool, error) {
		_, err := env.client.CoreV1().ServiceAccounts(r.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("default ServiceAccount of %s: %w", r.ns, err)
	}
	_, err := env.client.CoreV1().Pods(r.ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector: map[string]string{zoneKey: zone},
			Containers:   []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/v"}}}},
			Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}, metav1.CreateOptions{})
	return err
}

// staticPV creates a PV of the side's driver, pre-bound to the claim
// "data", that no provisioner made; with a class of the in-tree plugin, a
// PV the plugin made (inTreePV).
func (r *run) staticPV(ctx context.Context) error {
	if r.tc.class.provisioner == ebsInTree {
		return r.inTreePV(ctx)
	}
	_, err := env.client.CoreV1().PersistentVolumes().Create(ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-static"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              r.className(),
			ClaimRef:                      &v1.ObjectReference{Namespace: r.ns, Name: "data"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: r.driver(), VolumeHandle: "static-" + r.ns}},
		},
	}, metav1.CreateOptions{})
	return err
}

// cleanup deletes what the case made (the namespace deletes the rest).
func (r *run) cleanup(ctx context.Context) {
	c := env.client
	_ = c.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{})
	if r.tc.crossNS != nil {
		_ = c.CoreV1().Namespaces().Delete(ctx, r.sourceNamespace(), metav1.DeleteOptions{})
	}
	_ = c.StorageV1().StorageClasses().Delete(ctx, r.className(), metav1.DeleteOptions{})
	_ = c.StorageV1().VolumeAttributesClasses().Delete(ctx, r.ns+"-vac", metav1.DeleteOptions{})
	_ = c.CoreV1().PersistentVolumes().Delete(ctx, r.ns+"-static", metav1.DeleteOptions{})
	_ = c.StorageV1().VolumeAttachments().Delete(ctx, r.ns+"-va", metav1.DeleteOptions{})
	if snaps, err := snapclientset.NewForConfig(env.cluster.RESTConfig); err == nil {
		_ = snaps.SnapshotV1().VolumeSnapshotContents().Delete(ctx, lab.SnapshotContentName(r.ns, "snap"), metav1.DeleteOptions{})
	}
}

// isGone reports whether err says the object does not exist.
func isGone(err error) bool { return apierrors.IsNotFound(err) }
