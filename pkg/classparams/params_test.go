package classparams

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestParseClassParameters(t *testing.T) {
	tmpl := func(name, namespace string) secretTemplate {
		return secretTemplate{name: name, namespace: namespace, nameSet: true, namespaceSet: true}
	}
	every := func(t secretTemplate) map[SecretKind]secretTemplate {
		out := map[SecretKind]secretTemplate{}
		for _, k := range secretKinds {
			out[k] = t
		}
		return out
	}
	withKind := func(m map[SecretKind]secretTemplate, k SecretKind, t secretTemplate) map[SecretKind]secretTemplate {
		m[k] = t
		return m
	}
	tests := []struct {
		name           string
		params         map[string]string
		wantDriver     map[string]string
		wantFS         string
		wantSecrets    map[SecretKind]secretTemplate
		wantDeprecated []DeprecatedKey
		wantErr        error
	}{
		{
			name:        "prefixed keys are consumed",
			params:      map[string]string{"type": "fast", FSTypeKey: "xfs", "csi.storage.k8s.io/provisioner-secret-name": "s", "csi.storage.k8s.io/provisioner-secret-namespace": "ns"},
			wantDriver:  map[string]string{"type": "fast"},
			wantFS:      "xfs",
			wantSecrets: map[SecretKind]secretTemplate{SecretProvisioner: tmpl("s", "ns")},
		},
		{
			name:        "no parameters",
			wantDriver:  map[string]string{},
			wantSecrets: map[SecretKind]secretTemplate{},
		},
		{
			name:    "unknown prefixed key",
			params:  map[string]string{"csi.storage.k8s.io/fs-type": "xfs"},
			wantErr: ErrInvalidParameter,
		},
		{
			name:    "secret name without namespace",
			params:  map[string]string{"csi.storage.k8s.io/node-stage-secret-name": "s"},
			wantErr: ErrInvalidParameter,
		},
		{
			name:        "default secret is every kind's secret",
			params:      map[string]string{"csi.storage.k8s.io/secret-name": "${pvc.name}", "csi.storage.k8s.io/secret-namespace": "${pvc.namespace}"},
			wantDriver:  map[string]string{},
			wantSecrets: every(tmpl("${pvc.name}", "${pvc.namespace}")),
		},
		{
			name: "a kind's own secret wins over the default",
			params: map[string]string{"csi.storage.k8s.io/secret-name": "all", "csi.storage.k8s.io/secret-namespace": "ns",
				"csi.storage.k8s.io/node-stage-secret-name": "stage", "csi.storage.k8s.io/node-stage-secret-namespace": "stage-ns"},
			wantDriver:  map[string]string{},
			wantSecrets: withKind(every(tmpl("all", "ns")), SecretNodeStage, tmpl("stage", "stage-ns")),
		},
		{
			name: "half a kind's own secret does not fall back to the default",
			params: map[string]string{"csi.storage.k8s.io/secret-name": "all", "csi.storage.k8s.io/secret-namespace": "ns",
				"csi.storage.k8s.io/node-stage-secret-name": "stage"},
			wantErr: ErrInvalidParameter,
		},
		{
			name:    "default secret name without namespace",
			params:  map[string]string{"csi.storage.k8s.io/secret-name": "all"},
			wantErr: ErrInvalidParameter,
		},
		{
			name: "deprecated secret keys are honoured and still reach the driver",
			params: map[string]string{"csiProvisionerSecretName": "p", "csiProvisionerSecretNamespace": "p-ns",
				"csiControllerPublishSecretName": "cp", "csiControllerPublishSecretNamespace": "cp-ns",
				"csiNodeStageSecretName": "ns", "csiNodeStageSecretNamespace": "ns-ns",
				"csiNodePublishSecretName": "np", "csiNodePublishSecretNamespace": "np-ns"},
			wantDriver: map[string]string{"csiProvisionerSecretName": "p", "csiProvisionerSecretNamespace": "p-ns",
				"csiControllerPublishSecretName": "cp", "csiControllerPublishSecretNamespace": "cp-ns",
				"csiNodeStageSecretName": "ns", "csiNodeStageSecretNamespace": "ns-ns",
				"csiNodePublishSecretName": "np", "csiNodePublishSecretNamespace": "np-ns"},
			wantSecrets: map[SecretKind]secretTemplate{
				SecretProvisioner: tmpl("p", "p-ns"), SecretControllerPublish: tmpl("cp", "cp-ns"),
				SecretNodeStage: tmpl("ns", "ns-ns"), SecretNodePublish: tmpl("np", "np-ns"),
			},
			wantDeprecated: []DeprecatedKey{
				{Key: "csiControllerPublishSecretName", Use: "csi.storage.k8s.io/controller-publish-secret-name"},
				{Key: "csiControllerPublishSecretNamespace", Use: "csi.storage.k8s.io/controller-publish-secret-namespace"},
				{Key: "csiNodePublishSecretName", Use: "csi.storage.k8s.io/node-publish-secret-name"},
				{Key: "csiNodePublishSecretNamespace", Use: "csi.storage.k8s.io/node-publish-secret-namespace"},
				{Key: "csiNodeStageSecretName", Use: "csi.storage.k8s.io/node-stage-secret-name"},
				{Key: "csiNodeStageSecretNamespace", Use: "csi.storage.k8s.io/node-stage-secret-namespace"},
				{Key: "csiProvisionerSecretName", Use: "csi.storage.k8s.io/provisioner-secret-name"},
				{Key: "csiProvisionerSecretNamespace", Use: "csi.storage.k8s.io/provisioner-secret-namespace"},
			},
		},
		{
			name:        "a deprecated key and a prefixed one may set the two fields",
			params:      map[string]string{"csiProvisionerSecretName": "p", "csi.storage.k8s.io/provisioner-secret-namespace": "p-ns"},
			wantDriver:  map[string]string{"csiProvisionerSecretName": "p"},
			wantSecrets: map[SecretKind]secretTemplate{SecretProvisioner: tmpl("p", "p-ns")},
			wantDeprecated: []DeprecatedKey{
				{Key: "csiProvisionerSecretName", Use: "csi.storage.k8s.io/provisioner-secret-name"},
			},
		},
		{
			name: "a deprecated and a prefixed key for the same field",
			params: map[string]string{"csiNodeStageSecretName": "a", "csiNodeStageSecretNamespace": "ns",
				"csi.storage.k8s.io/node-stage-secret-name": "b"},
			wantErr: ErrInvalidParameter,
		},
		{
			name:           "deprecated fstype sets the filesystem and reaches the driver",
			params:         map[string]string{"fstype": "ext3", "type": "fast"},
			wantDriver:     map[string]string{"fstype": "ext3", "type": "fast"},
			wantFS:         "ext3",
			wantSecrets:    map[SecretKind]secretTemplate{},
			wantDeprecated: []DeprecatedKey{{Key: "fstype", Use: FSTypeKey}},
		},
		{
			name:           "deprecated fstype in any case",
			params:         map[string]string{"fsType": "xfs"},
			wantDriver:     map[string]string{"fsType": "xfs"},
			wantFS:         "xfs",
			wantSecrets:    map[SecretKind]secretTemplate{},
			wantDeprecated: []DeprecatedKey{{Key: "fsType", Use: FSTypeKey}},
		},
		{
			name:    "fstype and the prefixed fstype",
			params:  map[string]string{"fstype": "ext3", FSTypeKey: "ext4"},
			wantErr: ErrInvalidParameter,
		},
		{
			name:    "two spellings of fstype",
			params:  map[string]string{"fstype": "ext3", "fsType": "ext3"},
			wantErr: ErrInvalidParameter,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.params)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.wantDriver, got.Driver); diff != "" {
				t.Errorf("driver parameters (-want +got):\n%s", diff)
			}
			if got.FSType != tc.wantFS {
				t.Errorf("fsType = %q, want %q", got.FSType, tc.wantFS)
			}
			if diff := cmp.Diff(tc.wantSecrets, got.secrets, cmp.AllowUnexported(secretTemplate{})); diff != "" {
				t.Errorf("secret templates (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDeprecated, got.Deprecated); diff != "" {
				t.Errorf("deprecated keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSecretRefs(t *testing.T) {
	vars := TemplateVars{
		PVName:         "pvc-123",
		PVCName:        "data-web-0",
		PVCNamespace:   "apps",
		PVCAnnotations: map[string]string{"team": "blue"},
	}
	tests := []struct {
		name    string
		tmpl    map[SecretKind]secretTemplate
		want    map[SecretKind]*v1.SecretReference
		wantErr error
	}{
		{
			name: "all variables",
			tmpl: map[SecretKind]secretTemplate{
				SecretProvisioner: {name: "${pvc.name}-${pvc.annotations['team']}", namespace: "${pvc.namespace}", nameSet: true, namespaceSet: true},
				SecretNodePublish: {name: "np-${pv.name}", namespace: "secrets", nameSet: true, namespaceSet: true},
			},
			want: map[SecretKind]*v1.SecretReference{
				SecretProvisioner: {Name: "data-web-0-blue", Namespace: "apps"},
				SecretNodePublish: {Name: "np-pvc-123", Namespace: "secrets"},
			},
		},
		{
			name: "claim name may not choose the namespace",
			tmpl: map[SecretKind]secretTemplate{
				SecretProvisioner: {name: "s", namespace: "${pvc.name}", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "unknown variable",
			tmpl: map[SecretKind]secretTemplate{
				SecretNodeStage: {name: "${pvc.uid}", namespace: "ns", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "missing annotation",
			tmpl: map[SecretKind]secretTemplate{
				SecretNodeStage: {name: "${pvc.annotations['nope']}", namespace: "ns", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "result is not a valid name",
			tmpl: map[SecretKind]secretTemplate{
				SecretControllerExpand: {name: "Bad_Name", namespace: "ns", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := secretRefs(tc.tmpl, vars)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refs (-want +got):\n%s", diff)
			}
		})
	}
}
