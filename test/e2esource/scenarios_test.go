package e2esource

import (
	"context"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

const (
	cloneFinalizer    = "provisioner.storage.kubernetes.io/cloning-protection"
	snapshotFinalizer = "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
)

// zoneOf is the zone of a PV's node affinity (its first term's value).
func zoneOf(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == lab.ZoneKey && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// source makes a Bound claim "src" of size in zone z1 and returns its PV.
func source(t *testing.T, ctx context.Context, ns string, size int64) *v1.PersistentVolume {
	t.Helper()
	class := lab.NewClass(t, ctx, env.Cluster, ns+"-z1", lab.ClassOptions{Immediate: true, Zones: []string{"z1"}})
	lab.NewClaim(t, ctx, env.Cluster, ns, "src", class, size)
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "src")
	if z := zoneOf(pv); z != "z1" {
		t.Fatalf("source volume in zone %q, want z1", z)
	}
	return pv
}

// Clones into the source's class and into another class of the driver are
// made from the source (the mock records the content source) in the
// source's zone; the source's protection finalizer is gone afterwards.
func TestCloneIntoSameAndOtherClass(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	src := source(t, ctx, ns, 1<<30)
	other := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	lab.NewClaim(t, ctx, env.Cluster, ns, "same-class", *srcClass(t, ctx, ns), 1<<30, cloneOf("src"))
	lab.NewClaim(t, ctx, env.Cluster, ns, "other-class", other, 2<<30, cloneOf("src"))
	for _, name := range []string{"same-class", "other-class"} {
		pv := lab.WaitBound(t, ctx, env.Cluster, ns, name)
		vol := volume(t, ctx, pv.Spec.CSI.VolumeHandle)
		if vol.ContentSource == nil || vol.ContentSource.VolumeID != src.Spec.CSI.VolumeHandle {
			t.Errorf("%s: the driver's volume was made from %+v, want volume %s", name, vol.ContentSource, src.Spec.CSI.VolumeHandle)
		}
		if z := zoneOf(pv); z != "z1" {
			t.Errorf("%s: clone in zone %q, want the source's z1", name, z)
		}
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
		return err == nil && !hasFinalizer(c.Finalizers, cloneFinalizer), nil
	}); err != nil {
		t.Errorf("cloning-protection finalizer still on the source: %v", err)
	}
}

func srcClass(t *testing.T, ctx context.Context, ns string) *string {
	t.Helper()
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Spec.StorageClassName
}

// A clone smaller than its source is refused with an Event, and no volume
// is made.
func TestCloneSmallerThanSourceRefused(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	source(t, ctx, ns, 2<<30)
	before := volumeCount(t, ctx)
	lab.NewClaim(t, ctx, env.Cluster, ns, "small", *srcClass(t, ctx, ns), 1<<30, cloneOf("src"))
	lab.WaitEvent(t, ctx, env.Cluster, ns, "small", "Warning ProvisioningFailed", "the claim requests 1Gi, less than the 2Gi of its source claim")
	if n := volumeCount(t, ctx); n != before {
		t.Errorf("the driver has %d volumes, had %d: a refused clone made one", n, before)
	}
}

// Deleting a source claim waits while a clone of it is in flight (the
// driver answers UNAVAILABLE), and proceeds once the clone is made.
func TestSourceDeletionWaitsForClone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	source(t, ctx, ns, 1<<30)
	if err := env.SetFaults(ctx, []faults.Rule{{Method: "CreateVolume", Code: "Unavailable"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.SetFaults(context.WithoutCancel(ctx), nil) })
	lab.NewClaim(t, ctx, env.Cluster, ns, "clone", *srcClass(t, ctx, ns), 1<<30, cloneOf("src"))
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
		return err == nil && hasFinalizer(c.Finalizers, cloneFinalizer), nil
	}); err != nil {
		t.Fatalf("the source never got the cloning-protection finalizer: %v", err)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "src", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lab.WaitEvent(t, ctx, env.Cluster, ns, "clone", "Warning ProvisioningFailed", "Unavailable")
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
	if err != nil || c.DeletionTimestamp == nil {
		t.Fatalf("the source should be waiting for deletion, got %v (%v)", c, err)
	}
	if err := env.SetFaults(ctx, nil); err != nil {
		t.Fatal(err)
	}
	lab.WaitBound(t, ctx, env.Cluster, ns, "clone")
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "src", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Errorf("the source claim was not deleted after the clone was made: %v", err)
	}
}

// The stock kube-scheduler (no companion filter here) places a pod with a
// WaitForFirstConsumer clone claim on a node of z2, preferred by the pod,
// while the source is in z1: the provisioner sends the claim back with a
// reason that names the source and where it is, and makes no volume there.
func TestWFFCCloneOnWrongZoneSentBack(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	source(t, ctx, ns, 1<<30)
	before := volumeCount(t, ctx)
	c := client.CoreV1()
	lab.NewClaim(t, ctx, env.Cluster, ns, "clone", ns, 1<<30, cloneOf("src"))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "clone"}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		Volumes: []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "clone"}}}},
		Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: lab.ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{"z2"}}}}}}}},
	}}
	if _, err := c.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := lab.WaitEvent(t, ctx, env.Cluster, ns, "clone", "Warning ProvisioningFailed", "SourceUnreachable",
		`cannot reach the data source PersistentVolumeClaim "`+ns+`/src"`, lab.ZoneKey+" in (z1)")
	t.Logf("Event: %s", ev)
	if n := volumeCount(t, ctx); n != before {
		t.Errorf("the driver has %d volumes, had %d: a clone was made out of the source's reach", n, before)
	}
}

// snapshotOf takes a real snapshot of the claim "src" in the mock driver
// and creates the VolumeSnapshot and its bound VolumeSnapshotContent with
// the status the snapshot controller would give them.
func snapshotOf(t *testing.T, ctx context.Context, ns, name string, src *v1.PersistentVolume, ready bool) {
	t.Helper()
	csiSnap := createSnapshot(t, ctx, ns+"-"+name, src.Spec.CSI.VolumeHandle)
	srcClaim, handle, size := "src", src.Spec.CSI.VolumeHandle, csiSnap.GetSizeBytes()
	snap, err := snaps.SnapshotV1().VolumeSnapshots(ns).Create(ctx, &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &srcClaim}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs := v1.PersistentVolumeFilesystem
	contentName := "content-" + ns + "-" + name
	content, err := snaps.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapv1.VolumeSnapshotContentSpec{
			Driver: lab.DriverName, DeletionPolicy: snapv1.VolumeSnapshotContentRetain,
			Source:            snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle},
			VolumeSnapshotRef: v1.ObjectReference{Namespace: ns, Name: name, UID: snap.UID},
			SourceVolumeMode:  &fs,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = snaps.SnapshotV1().VolumeSnapshotContents().Delete(context.WithoutCancel(ctx), contentName, metav1.DeleteOptions{})
	})
	snapID, readyToUse := csiSnap.GetSnapshotId(), ready
	content.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &snapID, ReadyToUse: &readyToUse, RestoreSize: &size}
	if _, err := snaps.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setSnapshotStatus(t, ctx, ns, name, contentName, ready, size)
}

func setSnapshotStatus(t *testing.T, ctx context.Context, ns, name, contentName string, ready bool, size int64) {
	t.Helper()
	snap, err := snaps.SnapshotV1().VolumeSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &contentName, ReadyToUse: &ready,
		RestoreSize: resource.NewQuantity(size, resource.BinarySI)}
	if _, err := snaps.SnapshotV1().VolumeSnapshots(ns).UpdateStatus(ctx, snap, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Restores from a VolumeSnapshot: one not ready yet waits with an Event and
// is made once the snapshot is ready, one of a snapshot that does not exist
// is refused with an Event; the restored volume is made from the snapshot
// (in any zone: TestWFFCRestoreInAnotherZone), and the snapshot's
// protection finalizer is gone afterwards.
func TestRestoreFromSnapshot(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	src := source(t, ctx, ns, 1<<30)
	anyZone := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	snapshotOf(t, ctx, ns, "snap", src, false)

	lab.NewClaim(t, ctx, env.Cluster, ns, "restore", anyZone, 1<<30, restoreOf("snap"))
	lab.NewClaim(t, ctx, env.Cluster, ns, "from-nothing", anyZone, 1<<30, restoreOf("gone"))
	lab.WaitEvent(t, ctx, env.Cluster, ns, "restore", "Warning ProvisioningFailed", `VolumeSnapshot "`+ns+`/snap" is not ready to use yet`)
	lab.WaitEvent(t, ctx, env.Cluster, ns, "from-nothing", "Warning ProvisioningFailed", `the VolumeSnapshot "`+ns+`/gone" does not exist`)

	setSnapshotStatus(t, ctx, ns, "snap", "content-"+ns+"-snap", true, 1<<30)
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "restore")
	vol := volume(t, ctx, pv.Spec.CSI.VolumeHandle)
	snapshots, err := snaps.SnapshotV1().VolumeSnapshotContents().Get(ctx, "content-"+ns+"-snap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vol.ContentSource == nil || vol.ContentSource.SnapshotID != *snapshots.Status.SnapshotHandle {
		t.Errorf("restored volume made from %+v, want snapshot %s", vol.ContentSource, *snapshots.Status.SnapshotHandle)
	}
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		s, err := snaps.SnapshotV1().VolumeSnapshots(ns).Get(ctx, "snap", metav1.GetOptions{})
		return err == nil && !hasFinalizer(s.Finalizers, snapshotFinalizer), nil
	}); err != nil {
		t.Errorf("source-protection finalizer still on the snapshot: %v", err)
	}
	if c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "from-nothing", metav1.GetOptions{}); err != nil || c.Status.Phase != v1.ClaimPending {
		t.Errorf("claim from a missing snapshot: %v, %v; want Pending", c.Status.Phase, err)
	}
}

// A claim whose dataSourceRef names a populator's kind is left to the
// populator: a Normal Event says so, and no volume is made.
func TestPopulatorClaimLeftAlone(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	anyZone := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	before := volumeCount(t, ctx)
	group := "populator.example.com"
	lab.NewClaim(t, ctx, env.Cluster, ns, "populated", anyZone, 1<<30, func(c *v1.PersistentVolumeClaim) {
		c.Spec.DataSourceRef = &v1.TypedObjectReference{APIGroup: &group, Kind: "Sample", Name: "data"}
	})
	lab.WaitEvent(t, ctx, env.Cluster, ns, "populated", "Normal Provisioning", "Assuming an external populator will provision the volume", `Sample "data"`)
	if n := volumeCount(t, ctx); n != before {
		t.Errorf("the driver has %d volumes, had %d", n, before)
	}
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "populated", metav1.GetOptions{})
	if err != nil || c.Status.Phase != v1.ClaimPending {
		t.Errorf("populator claim: %v, %v; want Pending", c.Status.Phase, err)
	}
}

// A claim naming a VolumeAttributesClass reaches the driver with the class's
// parameters as mutable parameters, and its PV names the class.
func TestVolumeAttributesClass(t *testing.T) {
	ctx, ns := env.TestNamespaceWithClass(t, "s-")
	anyZone := lab.NewClass(t, ctx, env.Cluster, ns+"-any", lab.ClassOptions{Immediate: true})
	vacName := ns + "-gold"
	if _, err := client.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: vacName}, DriverName: lab.DriverName,
		Parameters: map[string]string{"iops": "5000", "throughput": "250"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().VolumeAttributesClasses().Delete(context.WithoutCancel(ctx), vacName, metav1.DeleteOptions{})
	})
	lab.NewClaim(t, ctx, env.Cluster, ns, "gold", anyZone, 1<<30, func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = &vacName })
	pv := lab.WaitBound(t, ctx, env.Cluster, ns, "gold")
	if got := pv.Spec.VolumeAttributesClassName; got == nil || *got != vacName {
		t.Errorf("PV volumeAttributesClassName = %v, want %s", got, vacName)
	}
	vol := volume(t, ctx, pv.Spec.CSI.VolumeHandle)
	if vol.MutableParameters["iops"] != "5000" || vol.MutableParameters["throughput"] != "250" {
		t.Errorf("the driver's volume has mutable parameters %v, want iops=5000 throughput=250", vol.MutableParameters)
	}
}
