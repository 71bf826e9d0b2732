package provisioner

import (
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	ebsDriver = "ebs.csi.aws.com"
	ebsInTree = "kubernetes.io/aws-ebs"
	ebsZone   = "topology.ebs.csi.aws.com/zone"
)

// ebsEnv is a provisioner for ebs.csi.aws.com (the mock answering to that
// name) with one node and one segment in each of us-east-1a and us-east-1b.
func ebsEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	for node, zone := range map[string]string{"n1": "us-east-1a", "n2": "us-east-1b"} {
		objs = append(objs,
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{ebsZone: zone}}},
			&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
				{Name: ebsDriver, NodeID: node, TopologyKeys: []string{ebsZone}}}}})
	}
	return newEnv(t, envOptions{driver: ebsDriver, cfg: Config{SupportsTopology: true}, objs: objs,
		mock: func(c *driver.Config) {
			c.Segments = []driver.SegmentConfig{
				{Topology: map[string]string{ebsZone: "us-east-1a"}, CapacityBytes: 10 * gi},
				{Topology: map[string]string{ebsZone: "us-east-1b"}, CapacityBytes: 10 * gi},
			}
		}})
}

func TestInTreePluginName(t *testing.T) {
	for driver, want := range map[string]string{
		"ebs.csi.aws.com": "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io": "kubernetes.io/gce-pd",
		"disk.csi.azure.com": "kubernetes.io/azure-disk", "file.csi.azure.com": "kubernetes.io/azure-file",
		"cinder.csi.openstack.org": "kubernetes.io/cinder", "csi.vsphere.vmware.com": "kubernetes.io/vsphere-volume",
		"pxd.portworx.com": "kubernetes.io/portworx-volume", testDriver: "",
	} {
		if got := InTreePluginName(driver); got != want {
			t.Errorf("InTreePluginName(%q) = %q, want %q", driver, got, want)
		}
	}
}

// A driver that replaces an in-tree plugin provisions claims of the
// plugin's classes as upstream does: the class translated to CSI (its
// parameters and its zone topology in the driver's keys), the PV written
// with the plugin's volume source and the plugin's topology labels. The
// class itself is not changed. Classes of the driver are served as ever;
// a class the translation refuses fails without CreateVolume; a class of
// another in-tree plugin is not ours.
func TestMigrationProvisionInTreeClass(t *testing.T) {
	gaZone := func(zones ...string) []v1.TopologySelectorTerm {
		return []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: v1.LabelTopologyZone, Values: zones}}}}
	}
	tests := []struct {
		name        string
		provisioner string
		params      map[string]string
		allowed     []v1.TopologySelectorTerm
		wantParams  map[string]string
		wantFSType  string
		wantZone    string
		wantInTree  bool
		wantIgnored bool
		wantErr     bool
	}{
		{name: "zone and fsType parameters", provisioner: ebsInTree, params: map[string]string{"type": "gp3", "fsType": "xfs", "zone": "us-east-1b"},
			wantParams: map[string]string{"type": "gp3"}, wantFSType: "xfs", wantZone: "us-east-1b", wantInTree: true},
		{name: "allowedTopologies with the zone label", provisioner: ebsInTree, params: map[string]string{"iopsPerGB": "10"}, allowed: gaZone("us-east-1a"),
			wantParams: map[string]string{"iopsPerGB": "10", "allowautoiopspergbincrease": "true"}, wantZone: "us-east-1a", wantInTree: true},
		{name: "class of the driver itself", provisioner: ebsDriver, params: map[string]string{"type": "gp3"},
			allowed:    []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: ebsZone, Values: []string{"us-east-1b"}}}}},
			wantParams: map[string]string{"type": "gp3"}, wantZone: "us-east-1b"},
		{name: "zone parameter and allowedTopologies together", provisioner: ebsInTree, params: map[string]string{"zone": "us-east-1a"},
			allowed: gaZone("us-east-1a"), wantErr: true},
		{name: "class of another in-tree plugin", provisioner: "kubernetes.io/gce-pd", wantIgnored: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := ebsEnv(t)
			class := makeClass("ebs").Immediate().WithParams()
			class.Provisioner, class.AllowedTopologies = tc.provisioner, tc.allowed
			for k, v := range tc.params {
				class.Parameters[k] = v
			}
			before := class.DeepCopy()
			pv, state, err := e.provision(t, makePVC("data", "ebs").PersistentVolumeClaim, class.StorageClass, nil)
			if diff := cmp.Diff(before, class.StorageClass); diff != "" {
				t.Errorf("Provision changed the class (-before +after):\n%s", diff)
			}
			var ignored *controller.IgnoredError
			if tc.wantIgnored || tc.wantErr {
				if err == nil || errors.As(err, &ignored) != tc.wantIgnored || state != controller.ProvisioningFinished {
					t.Errorf("Provision = %v, %v; want Finished with an error (ignored: %v)", state, err, tc.wantIgnored)
				}
				if len(e.csi.creates) != 0 {
					t.Errorf("CreateVolume called %d times", len(e.csi.creates))
				}
				return
			}
			if err != nil {
				t.Fatalf("Provision: %v", err)
			}
			req := e.csi.lastCreate(t)
			if diff := cmp.Diff(tc.wantParams, req.GetParameters()); diff != "" {
				t.Errorf("CreateVolume parameters (-want +got):\n%s", diff)
			}
			if got := req.GetVolumeCapabilities()[0].GetMount().GetFsType(); got != tc.wantFSType {
				t.Errorf("CreateVolume fsType = %q, want %q", got, tc.wantFSType)
			}
			wantReq := []*csi.Topology{{Segments: map[string]string{ebsZone: tc.wantZone}}}
			if diff := cmp.Diff(wantReq, req.GetAccessibilityRequirements().GetRequisite(), protocmp.Transform()); diff != "" {
				t.Errorf("requisite topology (-want +got):\n%s", diff)
			}
			checkMigratedPV(t, pv, e.mock.Volumes()[0].ID, tc.wantFSType, tc.wantZone, tc.wantInTree)
		})
	}
}

// checkMigratedPV checks the volume source and the topology of a PV of
// volume id in zone: the in-tree plugin's (awsElasticBlockStore, zone and
// region labels) or the driver's.
func checkMigratedPV(t *testing.T, pv *v1.PersistentVolume, id, fsType, zone string, inTree bool) {
	t.Helper()
	if !inTree {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != ebsDriver || pv.Spec.CSI.VolumeHandle != id || pv.Spec.AWSElasticBlockStore != nil {
			t.Errorf("PV source = %+v, want the driver's CSI source", pv.Spec.PersistentVolumeSource)
		}
		return
	}
	if pv.Spec.CSI != nil {
		t.Errorf("PV has a CSI source %+v, want only the in-tree one", pv.Spec.CSI)
	}
	if diff := cmp.Diff(&v1.AWSElasticBlockStoreVolumeSource{VolumeID: id, FSType: fsType}, pv.Spec.AWSElasticBlockStore); diff != "" {
		t.Errorf("awsElasticBlockStore source (-want +got):\n%s", diff)
	}
	wantAffinity := &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
		{Key: v1.LabelTopologyZone, Operator: v1.NodeSelectorOpIn, Values: []string{zone}},
		{Key: v1.LabelTopologyRegion, Operator: v1.NodeSelectorOpIn, Values: []string{"us-east-1"}},
	}}}}}
	if diff := cmp.Diff(wantAffinity, pv.Spec.NodeAffinity); diff != "" {
		t.Errorf("PV node affinity (-want +got):\n%s", diff)
	}
	if pv.Labels[v1.LabelTopologyZone] != zone {
		t.Errorf("PV labels = %v, want %s=%s", pv.Labels, v1.LabelTopologyZone, zone)
	}
	// As upstream: the deletion-secret annotations of the CSI PV stay.
	if _, ok := pv.Annotations[annDeletionSecretName]; !ok {
		t.Errorf("PV annotations = %v, want the deletion-secret ones", pv.Annotations)
	}
}

// Delete removes, through the driver, the volume of an in-tree PV of the
// plugin the driver replaces that kube-controller-manager marked as
// migrated to the driver: the PV translated to CSI (its volume ID without
// the aws:// prefix), its secret from its deletion-secret annotations or
// from its in-tree class translated to CSI. An in-tree PV not marked as
// migrated to this driver, and a PV of another in-tree plugin, are left
// alone.
func TestMigrationDelete(t *testing.T) {
	creds := map[string]string{"password": "hunter2"}
	inTreeClass := makeClass("ebs-secure").WithParams("type", "gp3",
		"csi.storage.k8s.io/provisioner-secret-name", "${pvc.name}-creds", "csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}")
	inTreeClass.Provisioner = ebsInTree
	e := ebsEnv(t, secret("apps", "data-creds", creds), inTreeClass.StorageClass)
	ebs := v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0123456789", FSType: "ext4"}}
	pd := v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}}
	tests := []struct {
		name        string
		source      v1.PersistentVolumeSource
		annotations map[string]string
		wantSecrets map[string]string
		wantIgnored bool
	}{
		{name: "migrated, secret from the translated in-tree class", source: ebs,
			annotations: map[string]string{annMigratedTo: ebsDriver}, wantSecrets: creds},
		{name: "migrated, empty deletion-secret annotations", source: ebs,
			annotations: map[string]string{annMigratedTo: ebsDriver, annDeletionSecretName: "", annDeletionSecretNamespace: ""}},
		{name: "migrated, deletion-secret annotations", source: ebs,
			annotations: map[string]string{annMigratedTo: ebsDriver, annDeletionSecretName: "data-creds", annDeletionSecretNamespace: "apps"}, wantSecrets: creds},
		{name: "in-tree PV not marked as migrated", source: ebs, annotations: map[string]string{}, wantIgnored: true},
		{name: "in-tree PV migrated to another driver", source: ebs, annotations: map[string]string{annMigratedTo: "other.example.com"}, wantIgnored: true},
		{name: "PV of another in-tree plugin", source: pd, annotations: map[string]string{annMigratedTo: "pd.csi.storage.gke.io"}, wantIgnored: true},
		{name: "PV of another in-tree plugin marked for this driver", source: pd, annotations: map[string]string{annMigratedTo: ebsDriver}, wantIgnored: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pv := &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pvc-uid-data", Annotations: tc.annotations},
				Spec: v1.PersistentVolumeSpec{StorageClassName: "ebs-secure", ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: "data"},
					PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete, PersistentVolumeSource: tc.source},
			}
			before := len(e.csi.deletes)
			err := e.p.Delete(e.ctx, pv)
			if tc.wantIgnored {
				var ignored *controller.IgnoredError
				if !errors.As(err, &ignored) || len(e.csi.deletes) != before {
					t.Errorf("Delete = %v with %d DeleteVolume calls, want IgnoredError and none", err, len(e.csi.deletes)-before)
				}
				return
			}
			if err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if len(e.csi.deletes) != before+1 {
				t.Fatalf("DeleteVolume calls = %d, want 1", len(e.csi.deletes)-before)
			}
			got := e.csi.deletes[before]
			if got.GetVolumeId() != "vol-0123456789" {
				t.Errorf("DeleteVolume volume ID = %q, want vol-0123456789", got.GetVolumeId())
			}
			if diff := cmp.Diff(tc.wantSecrets, got.GetSecrets()); diff != "" {
				t.Errorf("DeleteVolume secrets (-want +got):\n%s", diff)
			}
		})
	}
}

// Claims are provisioned when they wait for the driver, as upstream
// decides it: their storage-provisioner annotation (or the beta one) names
// the driver, or kube-controller-manager marked them as migrated to it. A
// claim that still waits for the in-tree plugin (the library would take
// it: the plugin's name is one of its provisioner names) is not.
func TestMigrationShouldProvision(t *testing.T) {
	e := ebsEnv(t)
	tests := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{name: "claim for the driver", annotations: map[string]string{annStorageProvisioner: ebsDriver}, want: true},
		{name: "beta annotation", annotations: map[string]string{annBetaStorageProvisioner: ebsDriver}, want: true},
		{name: "in-tree claim marked as migrated", annotations: map[string]string{annStorageProvisioner: ebsInTree, annMigratedTo: ebsDriver}, want: true},
		{name: "in-tree claim not migrated", annotations: map[string]string{annStorageProvisioner: ebsInTree}},
		{name: "claim of another provisioner", annotations: map[string]string{annStorageProvisioner: "other.example.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := makePVC("data", "ebs").PersistentVolumeClaim
			claim.Annotations = tc.annotations
			if got := e.p.ShouldProvision(e.ctx, claim); got != tc.want {
				t.Errorf("ShouldProvision = %v, want %v", got, tc.want)
			}
		})
	}
}
