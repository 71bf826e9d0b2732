package provisioner

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// secretKind names one of the secrets a StorageClass can reference.
type secretKind string

// The secret kinds, as they appear in parameter keys
// (csi.storage.k8s.io/<kind>-secret-name / -namespace).
const (
	secretProvisioner       secretKind = "provisioner"
	secretControllerPublish secretKind = "controller-publish"
	secretNodeStage         secretKind = "node-stage"
	secretNodePublish       secretKind = "node-publish"
	secretControllerExpand  secretKind = "controller-expand"
	secretNodeExpand        secretKind = "node-expand"
	// secretControllerModify is for ControllerModifyVolume (the
	// external-resizer's): it is recorded on the PV as annotations.
	secretControllerModify secretKind = "controller-modify"
)

var secretKinds = []secretKind{
	secretProvisioner, secretControllerPublish, secretNodeStage,
	secretNodePublish, secretControllerExpand, secretNodeExpand,
	secretControllerModify,
}

type secretField string

const (
	secretFieldName      secretField = "name"
	secretFieldNamespace secretField = "namespace"
)

func (k secretKind) param(f secretField) string {
	return fmt.Sprintf("%s%s-secret-%s", csiParameterPrefix, k, f)
}

// secretParameter reports whether key is a secret reference parameter, and
// which kind and field it names.
func secretParameter(key string) (secretKind, secretField, bool) {
	for _, k := range secretKinds {
		for _, f := range []secretField{secretFieldName, secretFieldNamespace} {
			if key == k.param(f) {
				return k, f, true
			}
		}
	}
	return "", "", false
}

// PV annotations that record the provisioner secret for DeleteVolume.
const (
	annDeletionSecretName      = "volume.kubernetes.io/provisioner-deletion-secret-name"
	annDeletionSecretNamespace = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
)

// PV annotations that record the controller-modify secret for the
// external-resizer's ControllerModifyVolume (upstream's names).
const (
	annModifySecretName      = "volume.kubernetes.io/controller-modify-secret-name"
	annModifySecretNamespace = "volume.kubernetes.io/controller-modify-secret-namespace"
)

// ErrSecretTemplate marks a StorageClass secret template that cannot be
// resolved for a claim (unknown variable, missing annotation, invalid result).
var ErrSecretTemplate = errors.New("invalid secret template")

// secretTemplate is a secret reference as written in the class.
type secretTemplate struct {
	name, namespace       string
	nameSet, namespaceSet bool
}

// templateVars are the values a secret template may refer to.
type templateVars struct {
	pvName         string
	pvcName        string
	pvcNamespace   string
	pvcAnnotations map[string]string
}

var templateVarRE = regexp.MustCompile(`\$\{([^}]*)\}`)
var annotationVarRE = regexp.MustCompile(`^pvc\.annotations\['([^']+)'\]$`)

// resolve expands ${pv.name}, ${pvc.name}, ${pvc.namespace} and
// ${pvc.annotations['key']} in tmpl. For a namespace (namespaceField) only
// ${pv.name} and ${pvc.namespace} are allowed: a claim's name and annotations
// are chosen by its user and must not select the namespace of a secret.
func (v templateVars) resolve(tmpl string, namespaceField bool) (string, error) {
	var errs []string
	out := templateVarRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		expr := m[2 : len(m)-1]
		switch {
		case expr == "pv.name":
			return v.pvName
		case expr == "pvc.namespace":
			return v.pvcNamespace
		case expr == "pvc.name" && !namespaceField:
			return v.pvcName
		}
		if sub := annotationVarRE.FindStringSubmatch(expr); sub != nil && !namespaceField {
			val, ok := v.pvcAnnotations[sub[1]]
			if !ok {
				errs = append(errs, fmt.Sprintf("claim has no annotation %q", sub[1]))
			}
			return val
		}
		errs = append(errs, fmt.Sprintf("variable %s is not allowed here", m))
		return ""
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%w %q: %s", ErrSecretTemplate, tmpl, strings.Join(errs, "; "))
	}
	return out, nil
}

// resolveSecretRef turns a class's secret template into a SecretReference for
// a claim, or nil when the class names no secret of that kind.
func resolveSecretRef(kind secretKind, t secretTemplate, vars templateVars) (*v1.SecretReference, error) {
	if !t.nameSet {
		return nil, nil
	}
	ns, err := vars.resolve(t.namespace, true)
	if err != nil {
		return nil, fmt.Errorf("%s secret namespace: %w", kind, err)
	}
	name, err := vars.resolve(t.name, false)
	if err != nil {
		return nil, fmt.Errorf("%s secret name: %w", kind, err)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return nil, fmt.Errorf("%w: %s secret namespace %q (from %q) is not a valid namespace: %s",
			ErrSecretTemplate, kind, ns, t.namespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("%w: %s secret name %q (from %q) is not a valid secret name: %s",
			ErrSecretTemplate, kind, name, t.name, strings.Join(msgs, "; "))
	}
	return &v1.SecretReference{Name: name, Namespace: ns}, nil
}

// secretRefs resolves every secret reference of a class for a claim.
func secretRefs(templates map[secretKind]secretTemplate, vars templateVars) (map[secretKind]*v1.SecretReference, error) {
	refs := make(map[secretKind]*v1.SecretReference, len(templates))
	for _, kind := range secretKinds {
		t, ok := templates[kind]
		if !ok {
			continue
		}
		ref, err := resolveSecretRef(kind, t, vars)
		if err != nil {
			return nil, err
		}
		refs[kind] = ref
	}
	return refs, nil
}
