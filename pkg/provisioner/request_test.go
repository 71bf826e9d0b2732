package provisioner

import (
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
)

func TestVolumeName(t *testing.T) {
	uid := types.UID("0a1b2c3d-0000-4000-8000-123456789abc")
	tests := []struct {
		name   string
		prefix string
		length int
		want   string
	}{
		{name: "full UID", prefix: "pvc", length: -1, want: "pvc-0a1b2c3d-0000-4000-8000-123456789abc"},
		{name: "truncated", prefix: "vol", length: 8, want: "vol-0a1b2c3d"},
		{name: "longer than UID", prefix: "vol", length: 100, want: "vol-0a1b2c3d00004000800012345678" + "9abc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := volumeName(tc.prefix, uid, tc.length); got != tc.want {
				t.Errorf("volumeName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCapacityRange(t *testing.T) {
	tests := []struct {
		name     string
		requests v1.ResourceList
		limits   v1.ResourceList
		want     *csi.CapacityRange
		wantErr  error
	}{
		{name: "request only", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}, want: &csi.CapacityRange{RequiredBytes: 1 << 30}},
		// As upstream, a claim's storage limit is not sent as limit_bytes.
		{name: "request and limit", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			limits: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}, want: &csi.CapacityRange{RequiredBytes: 1 << 30}},
		{name: "no request", wantErr: ErrInvalidClaim},
		{name: "zero request", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("0")}, wantErr: ErrInvalidClaim},
		{name: "limit below request is ignored", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
			limits: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}, want: &csi.CapacityRange{RequiredBytes: 2 << 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{
				Resources: v1.VolumeResourceRequirements{Requests: tc.requests, Limits: tc.limits}}}
			got, err := capacityRange(claim)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("range (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckClaim(t *testing.T) {
	empty, gold := "", "gold"
	tests := []struct {
		name    string
		spec    v1.PersistentVolumeClaimSpec
		wantErr string
	}{
		{name: "plain claim"},
		{name: "empty VolumeAttributesClass name", spec: v1.PersistentVolumeClaimSpec{VolumeAttributesClassName: &empty}},
		{name: "label selector", spec: v1.PersistentVolumeClaimSpec{Selector: &metav1.LabelSelector{}}, wantErr: "label selector"},
		{name: "VolumeAttributesClass (checked with the class, see vac_test.go)", spec: v1.PersistentVolumeClaimSpec{VolumeAttributesClassName: &gold}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkClaim(&v1.PersistentVolumeClaim{Spec: tc.spec})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (!errors.Is(err, ErrInvalidClaim) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want ErrInvalidClaim saying %q", err, tc.wantErr)
			}
		})
	}
}

// A claim's access modes become one CSI capability each, as upstream
// external-provisioner sends them (csi-lib-utils' mapping of each mode on
// its own), so a claim may ask for ReadWriteOnce and ReadOnlyMany; the
// claim's storage limit is not sent.
func TestBuildCreateRequestCapabilities(t *testing.T) {
	const (
		snw  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		snsw = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		snmw = csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		mnro = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		mnmw = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	)
	rwo, rwop, rox, rwx := v1.ReadWriteOnce, v1.ReadWriteOncePod, v1.ReadOnlyMany, v1.ReadWriteMany
	tests := []struct {
		name      string
		modes     []v1.PersistentVolumeAccessMode
		multi     bool // the driver has SINGLE_NODE_MULTI_WRITER
		block     bool
		wantModes []csi.VolumeCapability_AccessMode_Mode
	}{
		{name: "ReadWriteOnce", modes: []v1.PersistentVolumeAccessMode{rwo}, wantModes: []csi.VolumeCapability_AccessMode_Mode{snw}},
		{name: "ReadWriteOnce, SINGLE_NODE_MULTI_WRITER driver", modes: []v1.PersistentVolumeAccessMode{rwo}, multi: true, wantModes: []csi.VolumeCapability_AccessMode_Mode{snmw}},
		{name: "ReadWriteOncePod", modes: []v1.PersistentVolumeAccessMode{rwop}, wantModes: []csi.VolumeCapability_AccessMode_Mode{snw}},
		{name: "ReadWriteOncePod, SINGLE_NODE_MULTI_WRITER driver", modes: []v1.PersistentVolumeAccessMode{rwop}, multi: true, wantModes: []csi.VolumeCapability_AccessMode_Mode{snsw}},
		{name: "ReadOnlyMany", modes: []v1.PersistentVolumeAccessMode{rox}, wantModes: []csi.VolumeCapability_AccessMode_Mode{mnro}},
		{name: "ReadWriteMany", modes: []v1.PersistentVolumeAccessMode{rwx}, wantModes: []csi.VolumeCapability_AccessMode_Mode{mnmw}},
		{name: "ReadWriteOnce and ReadOnlyMany", modes: []v1.PersistentVolumeAccessMode{rwo, rox}, wantModes: []csi.VolumeCapability_AccessMode_Mode{snw, mnro}},
		{name: "ReadWriteMany and ReadOnlyMany", modes: []v1.PersistentVolumeAccessMode{rwx, rox}, multi: true, wantModes: []csi.VolumeCapability_AccessMode_Mode{mnmw, mnro}},
		{name: "block, ReadWriteOnce and ReadWriteMany", modes: []v1.PersistentVolumeAccessMode{rwo, rwx}, block: true, wantModes: []csi.VolumeCapability_AccessMode_Mode{snw, mnmw}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provisioner{cfg: Config{DriverName: testDriver, SupportsSingleNodeMultiWriter: tc.multi}}
			claim := makePVC("data", "c").PersistentVolumeClaim
			claim.Spec.AccessModes = tc.modes
			claim.Spec.Resources.Limits = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
			if tc.block {
				block := v1.PersistentVolumeBlock
				claim.Spec.VolumeMode = &block
			}
			class := makeClass("c").WithParams(classparams.FSTypeKey, "xfs")
			class.MountOptions = []string{"noatime"}
			req, err := p.buildCreateRequest(t.Context(), controller.ProvisionOptions{PVC: claim, StorageClass: class.StorageClass, PVName: "pvc-uid-data"})
			if err != nil {
				t.Fatalf("buildCreateRequest: %v", err)
			}
			var want []*csi.VolumeCapability
			for _, m := range tc.wantModes {
				c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m}}
				if tc.block {
					c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
				} else {
					c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs", MountFlags: []string{"noatime"}}}
				}
				want = append(want, c)
			}
			if diff := cmp.Diff(want, req.csi.GetVolumeCapabilities(), protocmp.Transform()); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(&csi.CapacityRange{RequiredBytes: gi}, req.csi.GetCapacityRange(), protocmp.Transform()); diff != "" {
				t.Errorf("capacity range (-want +got):\n%s", diff)
			}
		})
	}
}
