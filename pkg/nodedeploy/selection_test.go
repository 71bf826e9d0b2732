package nodedeploy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
)

// TestHandBackLabel: a claim handed back goes to the driver's pool when
// its class binds immediately, and leaves every node's selection when it
// waits for its first consumer.
func TestHandBackLabel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class *storagev1.StorageClass
		want  string
	}{
		{name: "immediate", class: &storagev1.StorageClass{VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}, want: nodelabel.PoolValue("d")},
		{name: "binding mode unset is immediate", class: &storagev1.StorageClass{}, want: nodelabel.PoolValue("d")},
		{name: "wait for first consumer", class: &storagev1.StorageClass{VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}},
		{name: "no class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HandBackLabel("d", tc.class); got != tc.want {
				t.Errorf("HandBackLabel = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNodeVolumeLabelled: an instance labels the PV it builds with its
// node; a central provisioner does not label.
func TestNodeVolumeLabelled(t *testing.T) {
	var pv v1.PersistentVolume
	(*Config)(nil).LabelVolume(&pv)
	if pv.Labels != nil {
		t.Errorf("central provisioner labelled its PV: %v", pv.Labels)
	}
	(&Config{NodeName: "n1"}).LabelVolume(&pv)
	if pv.Labels[nodelabel.Key] != "n1" {
		t.Errorf("labels %v, want %s=n1", pv.Labels, nodelabel.Key)
	}
}
