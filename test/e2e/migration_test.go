package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/state"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// CSI migration on the local control plane's real kube-controller-manager:
// the mock driver runs as ebs.csi.aws.com, the driver that replaces the
// in-tree plugin kubernetes.io/aws-ebs, with its own csi-provisioner. A
// claim of an in-tree class (provisioner kubernetes.io/aws-ebs, its zone in
// allowedTopologies with the well-known zone label) gets Bound to a PV
// with the in-tree source, created by the driver in the translated zone; a
// PV of the in-tree plugin created beforehand (as the in-tree plugin
// provisioned them) is marked as migrated by kube-controller-manager and,
// once its claim is deleted, its volume is deleted through the driver.
func TestCSIMigration(t *testing.T) {
	ctx, ns := lab.NewNamespace(t, env.Cluster, "e2e-")
	drv, class := startMigrationDriver(t, ctx)
	t.Run("in-tree PV marked as migrated is deleted through the driver", func(t *testing.T) {
		testMigratedPVDeleted(t, ctx, ns, drv, class)
	})
	t.Run("claim of the in-tree class is provisioned by the driver", func(t *testing.T) {
		testInTreeClassProvisioned(t, ctx, ns, drv, class)
	})
}

// The migration target of TestCSIMigration: the driver, the in-tree plugin
// it replaces, its topology key and the zone of its one segment.
const (
	ebsDriver = "ebs.csi.aws.com"
	ebsInTree = "kubernetes.io/aws-ebs"
	ebsZone   = "topology.ebs.csi.aws.com/zone"
	ebsZoneID = "us-east-1a"
	annMigTo  = "pv.kubernetes.io/migrated-to"
)

// startMigrationDriver starts the mock driver as ebs.csi.aws.com on a node
// of its own, with its csi-provisioner, and creates an immediate-binding
// class of the in-tree plugin (parameters type and fsType, the zone in
// allowedTopologies with the well-known zone label). It returns the driver
// and the class.
func startMigrationDriver(t *testing.T, ctx context.Context) (*lab.ExtraDriver, string) {
	t.Helper()
	const node = "node-ebs"
	drv, err := env.StartExtraDriver(ctx, lab.ExtraDriverSpec{
		Name: ebsDriver, Node: node, Topology: ebsZone + "=" + ebsZoneID, CapacityBytes: 10 * gi,
		NodeLabels: map[string]string{ebsZone: ebsZoneID, v1.LabelTopologyZone: ebsZoneID, v1.LabelTopologyRegion: "us-east-1"},
	})
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node, metav1.DeleteOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	class := "e2e-migration-aws-ebs"
	mode, reclaim := storagev1.VolumeBindingImmediate, v1.PersistentVolumeReclaimDelete
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: ebsInTree, VolumeBindingMode: &mode, ReclaimPolicy: &reclaim,
		Parameters: map[string]string{"type": "gp3", "fsType": "ext4"},
		AllowedTopologies: []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{
			{Key: v1.LabelTopologyZone, Values: []string{ebsZoneID}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.StorageV1().StorageClasses().Delete(context.WithoutCancel(ctx), class, metav1.DeleteOptions{})
	})
	return drv, class
}

// testMigratedPVDeleted: a PV of the in-tree plugin made before the
// migration (its volume exists in the driver) is bound to a claim,
// kube-controller-manager marks it as migrated, and deleting the claim
// deletes its volume through the driver and the PV.
func testMigratedPVDeleted(t *testing.T, ctx context.Context, ns string, drv *lab.ExtraDriver, class string) {
	id := createDriverVolume(t, ctx, drv.Socket, ns+"-legacy", ebsZone, ebsZoneID)
	pvName := ns + "-legacy"
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": ebsInTree}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, StorageClassName: class,
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: "legacy"},
			PersistentVolumeSource: v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{
				VolumeID: "aws://" + ebsZoneID + "/" + id, FSType: "ext4"}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.WithoutCancel(ctx), pvName, metav1.DeleteOptions{})
	})
	claim := migrationClaim(ns, "legacy", class)
	claim.Spec.VolumeName = pvName
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lab.WaitBound(t, ctx, env.Cluster, ns, "legacy")
	waitPV(t, ctx, pvName, "annotated "+annMigTo+"="+ebsDriver, func(pv *v1.PersistentVolume) bool {
		return pv.Annotations[annMigTo] == ebsDriver
	})
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "legacy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVolumeGone(t, ctx, drv, pvName, id)
}

// testInTreeClassProvisioned: a claim of the in-tree class gets Bound to a
// PV with the in-tree source of a volume the driver made in the translated
// zone with the class's parameters; deleting the claim deletes the volume.
func testInTreeClassProvisioned(t *testing.T, ctx context.Context, ns string, drv *lab.ExtraDriver, class string) {
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, migrationClaim(ns, "data", class), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := lab.WaitBound(t, ctx, env.Cluster, ns, "data")
	claim, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim annotations set by kube-controller-manager: %v", claim.Annotations)
	if got := claim.Annotations["volume.kubernetes.io/storage-provisioner"]; got != ebsDriver {
		t.Errorf("claim's storage-provisioner = %q, want %q", got, ebsDriver)
	}
	pv := waitPV(t, ctx, bound.Name, "annotated "+annMigTo+"="+ebsDriver, func(pv *v1.PersistentVolume) bool {
		return pv.Annotations[annMigTo] == ebsDriver
	})
	vols, err := drv.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(vols, func(v state.Volume) bool { return v.Name == pv.Name })
	if i < 0 {
		t.Fatalf("driver has no volume %s: %+v", pv.Name, vols)
	}
	vol := vols[i]
	if vol.Segment[ebsZone] != ebsZoneID || vol.Parameters["type"] != "gp3" {
		t.Errorf("driver volume %+v, want it in %s=%s with parameter type=gp3", vol, ebsZone, ebsZoneID)
	}
	src := pv.Spec.AWSElasticBlockStore
	if pv.Spec.CSI != nil || src == nil || src.VolumeID != vol.ID || src.FSType != "ext4" {
		t.Errorf("PV source %+v, want awsElasticBlockStore of volume %s with fsType ext4", pv.Spec.PersistentVolumeSource, vol.ID)
	}
	if got := pv.Annotations["pv.kubernetes.io/provisioned-by"]; got != ebsInTree {
		t.Errorf("PV provisioned-by = %q, want %q", got, ebsInTree)
	}
	if pv.Labels[v1.LabelTopologyZone] != ebsZoneID {
		t.Errorf("PV labels %v, want %s=%s", pv.Labels, v1.LabelTopologyZone, ebsZoneID)
	}
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVolumeGone(t, ctx, drv, pv.Name, vol.ID)
}

// createDriverVolume creates a volume with CreateVolume on the driver at
// socket, as the in-tree plugin had created it in the cloud, and returns
// its ID.
func createDriverVolume(t *testing.T, ctx context.Context, socket, name, key, zone string) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: gi},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{key: zone}}}},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

func migrationClaim(ns, name, class string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// waitPV waits until the PV satisfies ok and returns it.
func waitPV(t *testing.T, ctx context.Context, name, what string, ok func(*v1.PersistentVolume) bool) *v1.PersistentVolume {
	t.Helper()
	var pv *v1.PersistentVolume
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && ok(pv), nil
	}); err != nil {
		t.Fatalf("PV %s not %s (last seen %+v): %v", name, what, pv, err)
	}
	return pv
}

// waitVolumeGone waits until the driver no longer has volume id and the PV
// is deleted.
func waitVolumeGone(t *testing.T, ctx context.Context, drv *lab.ExtraDriver, pvName, id string) {
	t.Helper()
	var last string
	if err := env.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		vols, err := drv.Volumes(ctx)
		if err != nil {
			return false, err
		}
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			last = "PV deleted"
		case err != nil:
			return false, err
		default:
			last = fmt.Sprintf("PV %s, annotations %v, finalizers %v", pv.Status.Phase, pv.Annotations, pv.Finalizers)
		}
		has := slices.ContainsFunc(vols, func(v state.Volume) bool { return v.ID == id })
		return !has && apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("volume %s of PV %s not deleted through the driver (%s): %v", id, pvName, last, err)
	}
}
