package provisioner

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
)

// pvSecrets is every secret a provisioned PV records.
type pvSecrets struct {
	ControllerPublish, NodeStage, NodePublish, ControllerExpand, NodeExpand *v1.SecretReference
	Deletion, Modify                                                        string
}

func recordedSecrets(pv *v1.PersistentVolume) pvSecrets {
	src := pv.Spec.CSI
	return pvSecrets{
		ControllerPublish: src.ControllerPublishSecretRef, NodeStage: src.NodeStageSecretRef,
		NodePublish: src.NodePublishSecretRef, ControllerExpand: src.ControllerExpandSecretRef,
		NodeExpand: src.NodeExpandSecretRef,
		Deletion:   pv.Annotations[annDeletionSecretNamespace] + "/" + pv.Annotations[annDeletionSecretName],
		Modify:     pv.Annotations[annModifySecretNamespace] + "/" + pv.Annotations[annModifySecretName],
	}
}

// StorageClass parameters that external-provisioner v6.3.0 accepts work the
// same here: the default secret (csi.storage.k8s.io/secret-name and
// -namespace) stands in for every kind the class does not name, the
// deprecated csi*SecretName/Namespace keys set their kind's secret (and
// still reach the driver), and the deprecated unprefixed fstype sets the
// filesystem (and still reaches the driver); fstype given twice is refused.
func TestUpstreamClassParameters(t *testing.T) {
	creds := &v1.SecretReference{Name: "data-creds", Namespace: "apps"}
	stage := &v1.SecretReference{Name: "stage", Namespace: "vault"}
	tests := []struct {
		name        string
		params      []string
		wantErr     error
		wantParams  map[string]string
		wantCreate  map[string]string // CreateVolume's secrets
		wantFSType  string
		wantSecrets pvSecrets
	}{
		{
			name:       "default secret for every kind",
			params:     []string{"csi.storage.k8s.io/secret-name", "${pvc.name}-creds", "csi.storage.k8s.io/secret-namespace", "${pvc.namespace}"},
			wantParams: map[string]string{},
			wantCreate: map[string]string{"password": "hunter2"},
			wantSecrets: pvSecrets{ControllerPublish: creds, NodeStage: creds, NodePublish: creds, ControllerExpand: creds, NodeExpand: creds,
				Deletion: "apps/data-creds", Modify: "apps/data-creds"},
		},
		{
			name: "a kind's own secret beside the default",
			params: []string{"csi.storage.k8s.io/secret-name", "${pvc.name}-creds", "csi.storage.k8s.io/secret-namespace", "${pvc.namespace}",
				"csi.storage.k8s.io/node-stage-secret-name", "stage", "csi.storage.k8s.io/node-stage-secret-namespace", "vault"},
			wantParams: map[string]string{},
			wantCreate: map[string]string{"password": "hunter2"},
			wantSecrets: pvSecrets{ControllerPublish: creds, NodeStage: stage, NodePublish: creds, ControllerExpand: creds, NodeExpand: creds,
				Deletion: "apps/data-creds", Modify: "apps/data-creds"},
		},
		{
			name: "deprecated secret keys",
			params: []string{"csiProvisionerSecretName", "${pvc.name}-creds", "csiProvisionerSecretNamespace", "${pvc.namespace}",
				"csiNodeStageSecretName", "stage", "csiNodeStageSecretNamespace", "vault"},
			wantParams: map[string]string{"csiProvisionerSecretName": "${pvc.name}-creds", "csiProvisionerSecretNamespace": "${pvc.namespace}",
				"csiNodeStageSecretName": "stage", "csiNodeStageSecretNamespace": "vault"},
			wantCreate:  map[string]string{"password": "hunter2"},
			wantSecrets: pvSecrets{NodeStage: stage, Deletion: "apps/data-creds", Modify: "/"},
		},
		{
			name:        "deprecated fstype",
			params:      []string{"fstype", "xfs", "type", "fast"},
			wantParams:  map[string]string{"fstype": "xfs", "type": "fast"},
			wantFSType:  "xfs",
			wantSecrets: pvSecrets{Deletion: "/", Modify: "/"},
		},
		{
			name:    "fstype twice",
			params:  []string{"fstype", "xfs", classparams.FSTypeKey, "ext4"},
			wantErr: ErrInvalidParameter,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{objs: []runtime.Object{
				secret("apps", "data-creds", map[string]string{"password": "hunter2"}),
				secret("vault", "stage", map[string]string{"key": "stage"}),
			}})
			class := makeClass("legacy").Immediate().WithParams(tc.params...)
			pv, state, err := e.provision(t, makePVC("data", "legacy").PersistentVolumeClaim, class.StorageClass, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || state != controller.ProvisioningFinished {
					t.Fatalf("Provision = %v, %v; want Finished with %v", state, err, tc.wantErr)
				}
				if len(e.csi.creates) != 0 {
					t.Errorf("%d CreateVolume call(s) for a refused class", len(e.csi.creates))
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
			if diff := cmp.Diff(tc.wantCreate, req.GetSecrets()); diff != "" {
				t.Errorf("CreateVolume secrets (-want +got):\n%s", diff)
			}
			if got := req.GetVolumeCapabilities()[0].GetMount().GetFsType(); got != tc.wantFSType {
				t.Errorf("CreateVolume fsType = %q, want %q", got, tc.wantFSType)
			}
			if pv.Spec.CSI.FSType != tc.wantFSType {
				t.Errorf("PV fsType = %q, want %q", pv.Spec.CSI.FSType, tc.wantFSType)
			}
			if diff := cmp.Diff(tc.wantSecrets, recordedSecrets(pv)); diff != "" {
				t.Errorf("PV secrets (-want +got):\n%s", diff)
			}
		})
	}
}
