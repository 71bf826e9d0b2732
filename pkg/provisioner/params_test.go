package provisioner

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestParseClassParameters(t *testing.T) {
	tests := []struct {
		name       string
		params     map[string]string
		wantDriver map[string]string
		wantFS     string
		wantErr    error
	}{
		{
			name:       "prefixed keys are consumed",
			params:     map[string]string{"type": "fast", paramFSType: "xfs", "csi.storage.k8s.io/provisioner-secret-name": "s", "csi.storage.k8s.io/provisioner-secret-namespace": "ns"},
			wantDriver: map[string]string{"type": "fast"},
			wantFS:     "xfs",
		},
		{
			name:       "no parameters",
			wantDriver: map[string]string{},
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseClassParameters(tc.params)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.wantDriver, got.driver); diff != "" {
				t.Errorf("driver parameters (-want +got):\n%s", diff)
			}
			if got.fsType != tc.wantFS {
				t.Errorf("fsType = %q, want %q", got.fsType, tc.wantFS)
			}
		})
	}
}

func TestSecretRefs(t *testing.T) {
	vars := templateVars{
		pvName:         "pvc-123",
		pvcName:        "data-web-0",
		pvcNamespace:   "apps",
		pvcAnnotations: map[string]string{"team": "blue"},
	}
	tests := []struct {
		name    string
		tmpl    map[secretKind]secretTemplate
		want    map[secretKind]*v1.SecretReference
		wantErr error
	}{
		{
			name: "all variables",
			tmpl: map[secretKind]secretTemplate{
				secretProvisioner: {name: "${pvc.name}-${pvc.annotations['team']}", namespace: "${pvc.namespace}", nameSet: true, namespaceSet: true},
				secretNodePublish: {name: "np-${pv.name}", namespace: "secrets", nameSet: true, namespaceSet: true},
			},
			want: map[secretKind]*v1.SecretReference{
				secretProvisioner: {Name: "data-web-0-blue", Namespace: "apps"},
				secretNodePublish: {Name: "np-pvc-123", Namespace: "secrets"},
			},
		},
		{
			name: "claim name may not choose the namespace",
			tmpl: map[secretKind]secretTemplate{
				secretProvisioner: {name: "s", namespace: "${pvc.name}", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "unknown variable",
			tmpl: map[secretKind]secretTemplate{
				secretNodeStage: {name: "${pvc.uid}", namespace: "ns", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "missing annotation",
			tmpl: map[secretKind]secretTemplate{
				secretNodeStage: {name: "${pvc.annotations['nope']}", namespace: "ns", nameSet: true, namespaceSet: true},
			},
			wantErr: ErrSecretTemplate,
		},
		{
			name: "result is not a valid name",
			tmpl: map[secretKind]secretTemplate{
				secretControllerExpand: {name: "Bad_Name", namespace: "ns", nameSet: true, namespaceSet: true},
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
