package provisioner

import (
	"regexp"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
)

// With --controller-publish-readonly a PV is read-only exactly when its
// claim asked for ReadOnlyMany only (one MULTI_NODE_READER_ONLY capability),
// as upstream external-provisioner marks it.
func TestBuildPVControllerPublishReadOnly(t *testing.T) {
	const (
		rox = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	)
	tests := []struct {
		name         string
		flag         bool
		modes        []csi.VolumeCapability_AccessMode_Mode
		wantReadOnly bool
	}{
		{name: "flag on, ReadOnlyMany only", flag: true, modes: []csi.VolumeCapability_AccessMode_Mode{rox}, wantReadOnly: true},
		{name: "flag off, ReadOnlyMany only", modes: []csi.VolumeCapability_AccessMode_Mode{rox}},
		{name: "flag on, ReadWriteOnce", flag: true, modes: []csi.VolumeCapability_AccessMode_Mode{rwo}},
		{name: "flag on, two capabilities", flag: true, modes: []csi.VolumeCapability_AccessMode_Mode{rox, rwo}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provisioner{cfg: Config{DriverName: "d", ControllerPublishReadOnly: tc.flag}}
			req := &createRequest{csi: &csi.CreateVolumeRequest{Name: "pvc-1"}}
			for _, m := range tc.modes {
				req.csi.VolumeCapabilities = append(req.csi.VolumeCapabilities,
					&csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m}})
			}
			opts := controller.ProvisionOptions{
				PVName:       "pvc-1",
				StorageClass: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}},
				PVC:          &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}},
			}
			resp := &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v1", CapacityBytes: 1 << 20}}
			pv, err := p.buildPV(opts, req, resp)
			if err != nil {
				t.Fatalf("buildPV: %v", err)
			}
			if got := pv.Spec.CSI.ReadOnly; got != tc.wantReadOnly {
				t.Errorf("spec.csi.readOnly = %t, want %t", got, tc.wantReadOnly)
			}
		})
	}
}

// Every PV names the provisioner instance that made it in the
// storage.kubernetes.io/csiProvisionerIdentity volume attribute, as upstream:
// <start time in ms>-<random below 10000>-<driver>, plus -<node> in node
// deployment; a volume context key of the driver's own wins.
func TestProvisionerIdentity(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true}, nodes: threeZones})
	pv, _, err := e.provision(t, makePVC("data", "c").withSelectedNode("n1").PersistentVolumeClaim, makeClass("c").StorageClass, makeNode("n1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	identity := regexp.MustCompile(`^[0-9]{13}-[0-9]{1,4}-` + regexp.QuoteMeta(testDriver) + `$`)
	attrs := pv.Spec.CSI.VolumeAttributes
	if got := attrs["storage.kubernetes.io/csiProvisionerIdentity"]; !identity.MatchString(got) {
		t.Errorf("csiProvisionerIdentity = %q, want <ms>-<random>-%s", got, testDriver)
	}
	if attrs[driver.ContextSegment] == "" {
		t.Errorf("volume context lost: %v", attrs)
	}

	if got := (Config{DriverName: testDriver, Node: &nodedeploy.Config{NodeName: "n1"}}).withDefaults().Identity; !strings.HasSuffix(got, "-"+testDriver+"-n1") {
		t.Errorf("node deployment identity = %q, want it to end with -%s-n1", got, testDriver)
	}
	p := &Provisioner{cfg: Config{DriverName: testDriver, Identity: "ours"}}
	vol := &csi.Volume{VolumeContext: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "driver's", "k": "v"}}
	if diff := cmp.Diff(map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "driver's", "k": "v"}, p.volumeAttributes(vol)); diff != "" {
		t.Errorf("volume attributes (-want +got):\n%s", diff)
	}
}
