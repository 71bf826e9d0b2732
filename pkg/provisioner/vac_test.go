package provisioner

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"
)

func makeVAC(name, driverName string, params map[string]string) *storagev1.VolumeAttributesClass {
	return &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driverName, Parameters: params}
}

func (c claimBuilder) withAttributesClass(name string) claimBuilder {
	c.Spec.VolumeAttributesClassName = &name
	return c
}

func TestAttributesClass(t *testing.T) {
	gold := makeVAC("gold", testDriver, map[string]string{"iops": "5000", "throughput": "250"})
	foreign := makeVAC("foreign", "other.example.com", map[string]string{"iops": "1"})
	class := makeClass("zonal").Immediate().WithParams(
		"csi.storage.k8s.io/controller-modify-secret-name", "modify-${pvc.name}",
		"csi.storage.k8s.io/controller-modify-secret-namespace", "${pvc.namespace}")
	for _, tc := range []struct {
		name       string
		cfg        Config
		noSources  bool
		apiMissing bool
		vac        string
		wantParams map[string]string
		wantErr    string
	}{
		{name: "parameters reach the driver as mutable parameters", cfg: sourceCaps, vac: "gold",
			wantParams: map[string]string{"iops": "5000", "throughput": "250"}},
		{name: "driver without MODIFY_VOLUME", cfg: Config{SupportsTopology: true}, vac: "gold",
			wantErr: `CSI driver "mock.csi.example.com" lacks the MODIFY_VOLUME controller capability`},
		{name: "class of another driver", cfg: sourceCaps, vac: "foreign",
			wantErr: `VolumeAttributesClass "foreign" is for CSI driver "other.example.com", not "mock.csi.example.com"`},
		{name: "class missing", cfg: sourceCaps, vac: "silver", wantErr: `VolumeAttributesClass "silver" does not exist`},
		{name: "feature gate off", cfg: sourceCaps, noSources: true, vac: "gold",
			wantErr: "VolumeAttributesClasses are switched off in this csi-provisioner"},
		{name: "API without VolumeAttributesClass (yet)", cfg: sourceCaps, apiMissing: true, vac: "gold",
			wantErr: "the API does not serve storage.k8s.io/v1 VolumeAttributesClass yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: tc.cfg, nodes: threeZones, objs: []runtime.Object{gold, foreign}, sources: !tc.noSources, apisMissing: tc.apiMissing})
			claim := makePVC("data", "zonal").withAttributesClass(tc.vac)
			pv, state, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, nil)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrAttributesClassRefused) || !strings.Contains(err.Error(), tc.wantErr) || state != controller.ProvisioningFinished {
					t.Fatalf("Provision = %v, %v; want ErrAttributesClassRefused saying %q", state, err, tc.wantErr)
				}
				if len(e.csi.creates) != 0 {
					t.Errorf("%d CreateVolume call(s) for a refused claim", len(e.csi.creates))
				}
				return
			}
			if err != nil {
				t.Fatalf("Provision: %v", err)
			}
			if diff := cmp.Diff(tc.wantParams, e.csi.lastCreate(t).GetMutableParameters()); diff != "" {
				t.Errorf("mutable parameters (-want +got):\n%s", diff)
			}
			if got := pv.Spec.VolumeAttributesClassName; got == nil || *got != tc.vac {
				t.Errorf("PV volumeAttributesClassName = %v, want %q", got, tc.vac)
			}
			wantAnn := map[string]string{annModifySecretName: "modify-data", annModifySecretNamespace: "apps",
				annDeletionSecretName: "", annDeletionSecretNamespace: ""}
			if diff := cmp.Diff(wantAnn, pv.Annotations); diff != "" {
				t.Errorf("PV annotations (-want +got):\n%s", diff)
			}
		})
	}
}

// With upstream's VolumeAttributesClass=false gate the field is ignored,
// as upstream does: no mutable parameters, no class on the PV.
func TestAttributesClassIgnored(t *testing.T) {
	cfg := sourceCaps
	cfg.IgnoreAttributesClasses = true
	e := newEnv(t, envOptions{cfg: cfg, nodes: threeZones, sources: true})
	claim := makePVC("data", "zonal").withAttributesClass("missing")
	pv, _, err := e.provision(t, claim.PersistentVolumeClaim, makeClass("zonal").Immediate().StorageClass, nil)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if p := e.csi.lastCreate(t).GetMutableParameters(); len(p) != 0 {
		t.Errorf("mutable parameters %v, want none", p)
	}
	if pv.Spec.VolumeAttributesClassName != nil {
		t.Errorf("PV volumeAttributesClassName = %q, want none", *pv.Spec.VolumeAttributesClassName)
	}
}
