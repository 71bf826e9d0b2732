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
		{name: "request and limit", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			limits: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}, want: &csi.CapacityRange{RequiredBytes: 1 << 30, LimitBytes: 2 << 30}},
		{name: "no request", wantErr: ErrInvalidClaim},
		{name: "zero request", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("0")}, wantErr: ErrInvalidClaim},
		{name: "limit below request", requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
			limits: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}, wantErr: ErrInvalidClaim},
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
