package classparams

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SecretKind names one of the secrets a StorageClass can reference.
type SecretKind string

// The secret kinds, as they appear in parameter keys
// (csi.storage.k8s.io/<kind>-secret-name / -namespace). Each is recorded
// on the PV: the provisioner secret (used by CreateVolume and
// DeleteVolume) and the controller-modify one as annotations, the others
// in the PV's CSI source.
const (
	SecretProvisioner       SecretKind = "provisioner"
	SecretControllerPublish SecretKind = "controller-publish"
	SecretNodeStage         SecretKind = "node-stage"
	SecretNodePublish       SecretKind = "node-publish"
	SecretControllerExpand  SecretKind = "controller-expand"
	SecretNodeExpand        SecretKind = "node-expand"
	// SecretControllerModify is for ControllerModifyVolume (the
	// external-resizer's): it is recorded on the PV as annotations.
	SecretControllerModify SecretKind = "controller-modify"
	// secretDefault is csi.storage.k8s.io/secret-name / -namespace: the
	// secret of every kind the class does not name (upstream's fallback).
	secretDefault SecretKind = "default"
)

var secretKinds = []SecretKind{
	SecretProvisioner, SecretControllerPublish, SecretNodeStage,
	SecretNodePublish, SecretControllerExpand, SecretNodeExpand,
	SecretControllerModify,
}

type secretField string

const (
	secretFieldName      secretField = "name"
	secretFieldNamespace secretField = "namespace"
)

var secretFields = []secretField{secretFieldName, secretFieldNamespace}

// param is the prefixed parameter key of a kind's field.
func (k SecretKind) param(f secretField) string {
	if k == secretDefault {
		return fmt.Sprintf("%ssecret-%s", Prefix, f)
	}
	return fmt.Sprintf("%s%s-secret-%s", Prefix, k, f)
}

// secretSlot is one field of one kind of secret.
type secretSlot struct {
	kind  SecretKind
	field secretField
}

// deprecatedSecretKeys are upstream's unprefixed keys of old (before
// external-provisioner 1.0), still honoured there: they set the same secret
// as their prefixed key and, being unprefixed, are passed to the driver too.
var deprecatedSecretKeys = map[string]secretSlot{
	"csiProvisionerSecretName":            {SecretProvisioner, secretFieldName},
	"csiProvisionerSecretNamespace":       {SecretProvisioner, secretFieldNamespace},
	"csiControllerPublishSecretName":      {SecretControllerPublish, secretFieldName},
	"csiControllerPublishSecretNamespace": {SecretControllerPublish, secretFieldNamespace},
	"csiNodeStageSecretName":              {SecretNodeStage, secretFieldName},
	"csiNodeStageSecretNamespace":         {SecretNodeStage, secretFieldNamespace},
	"csiNodePublishSecretName":            {SecretNodePublish, secretFieldName},
	"csiNodePublishSecretNamespace":       {SecretNodePublish, secretFieldNamespace},
}

// secretParameter reports whether key is a secret reference parameter
// (prefixed, the default secret's, or a deprecated unprefixed one), and
// which kind and field it sets.
func secretParameter(key string) (secretSlot, bool) {
	if slot, ok := deprecatedSecretKeys[key]; ok {
		return slot, true
	}
	if !strings.HasPrefix(key, Prefix) {
		return secretSlot{}, false
	}
	for _, k := range append([]SecretKind{secretDefault}, secretKinds...) {
		for _, f := range secretFields {
			if key == k.param(f) {
				return secretSlot{k, f}, true
			}
		}
	}
	return secretSlot{}, false
}

// secretKeys holds, for each secret slot, the keys of a class that set it
// and their values.
type secretKeys map[secretSlot]map[string]string

// collectSecretKeys picks the secret parameters out of a class's parameters.
func collectSecretKeys(params map[string]string) secretKeys {
	out := secretKeys{}
	for k, v := range params {
		if slot, ok := secretParameter(k); ok {
			out.add(slot, k, v)
		}
	}
	return out
}

func (s secretKeys) add(slot secretSlot, key, value string) {
	if s[slot] == nil {
		s[slot] = map[string]string{}
	}
	s[slot][key] = value
}

// own returns the template a class writes for kind itself, whether it
// writes one, and an error when it writes a field twice (a deprecated and
// a prefixed key) or one field without the other, as upstream refuses.
func (s secretKeys) own(kind SecretKind) (secretTemplate, bool, error) {
	var t secretTemplate
	for _, f := range secretFields {
		keys := s[secretSlot{kind, f}]
		if len(keys) > 1 {
			names := make([]string, 0, len(keys))
			for k := range keys {
				names = append(names, k)
			}
			sort.Strings(names)
			return secretTemplate{}, false, fmt.Errorf("%w: %s secret %s is set by %s: use only %q",
				ErrInvalidParameter, kind, f, strings.Join(names, " and "), kind.param(f))
		}
		for _, v := range keys {
			if f == secretFieldName {
				t.name, t.nameSet = v, true
			} else {
				t.namespace, t.namespaceSet = v, true
			}
		}
	}
	if t.nameSet != t.namespaceSet {
		return secretTemplate{}, false, fmt.Errorf("%w: %s secret needs both %q and %q",
			ErrInvalidParameter, kind, kind.param(secretFieldName), kind.param(secretFieldNamespace))
	}
	return t, t.nameSet, nil
}

// template returns the template of kind: the class's own for the kind, else
// the default secret's (csi.storage.k8s.io/secret-name / -namespace), as
// upstream. ok is false when the class names neither.
func (s secretKeys) template(kind SecretKind) (t secretTemplate, ok bool, err error) {
	if t, ok, err = s.own(kind); ok || err != nil {
		return t, ok, err
	}
	return s.own(secretDefault)
}

// templates returns the template of every kind the class names, directly
// or through the default secret.
func (s secretKeys) templates() (map[SecretKind]secretTemplate, error) {
	out := map[SecretKind]secretTemplate{}
	for _, kind := range secretKinds {
		t, ok, err := s.template(kind)
		if err != nil {
			return nil, err
		}
		if ok {
			out[kind] = t
		}
	}
	return out, nil
}

// ErrSecretTemplate marks a StorageClass secret template that cannot be
// resolved for a claim (unknown variable, missing annotation, invalid result).
var ErrSecretTemplate = errors.New("invalid secret template")

// secretTemplate is a secret reference as written in the class.
type secretTemplate struct {
	name, namespace       string
	nameSet, namespaceSet bool
}

// TemplateVars are the values a secret template may refer to.
type TemplateVars struct {
	// PVName is ${pv.name}, the name of the PV (and the volume).
	PVName string
	// PVCName is ${pvc.name}, the claim's name.
	PVCName string
	// PVCNamespace is ${pvc.namespace}, the claim's namespace.
	PVCNamespace string
	// PVCAnnotations are ${pvc.annotations['key']}, the claim's
	// annotations.
	PVCAnnotations map[string]string
}

var templateVarRE = regexp.MustCompile(`\$\{([^}]*)\}`)
var annotationVarRE = regexp.MustCompile(`^pvc\.annotations\['([^']+)'\]$`)

// resolve expands ${pv.name}, ${pvc.name}, ${pvc.namespace} and
// ${pvc.annotations['key']} in tmpl. For a namespace (namespaceField) only
// ${pv.name} and ${pvc.namespace} are allowed: a claim's name and annotations
// are chosen by its user and must not select the namespace of a secret.
func (v TemplateVars) resolve(tmpl string, namespaceField bool) (string, error) {
	var errs []string
	out := templateVarRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		expr := m[2 : len(m)-1]
		switch {
		case expr == "pv.name":
			return v.PVName
		case expr == "pvc.namespace":
			return v.PVCNamespace
		case expr == "pvc.name" && !namespaceField:
			return v.PVCName
		}
		if sub := annotationVarRE.FindStringSubmatch(expr); sub != nil && !namespaceField {
			val, ok := v.PVCAnnotations[sub[1]]
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
func resolveSecretRef(kind SecretKind, t secretTemplate, vars TemplateVars) (*v1.SecretReference, error) {
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
func secretRefs(templates map[SecretKind]secretTemplate, vars TemplateVars) (map[SecretKind]*v1.SecretReference, error) {
	refs := make(map[SecretKind]*v1.SecretReference, len(templates))
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

// Secrets resolves every secret reference of the class for a claim: by
// kind, the kinds the class names (directly or through the default
// secret). An error wraps ErrSecretTemplate.
func (p Parameters) Secrets(vars TemplateVars) (map[SecretKind]*v1.SecretReference, error) {
	return secretRefs(p.secrets, vars)
}

// ClassSecret is one secret reference as a class writes it (templates
// included); Resolve turns it into a SecretReference for a claim.
type ClassSecret struct {
	kind SecretKind
	t    secretTemplate
}

// ProvisionerSecret returns the class's provisioner secret (its own keys,
// deprecated ones or the default secret) and whether the class names one,
// reading only the secret keys: what DeleteVolume needs from the class of
// a PV that did not record its secret. An error (a field set twice, or one
// without the other) wraps ErrInvalidParameter.
func ProvisionerSecret(params map[string]string) (ClassSecret, bool, error) {
	t, ok, err := collectSecretKeys(params).template(SecretProvisioner)
	return ClassSecret{kind: SecretProvisioner, t: t}, ok, err
}

// Resolve expands the secret's templates for a claim; nil when the class
// names no such secret. An error wraps ErrSecretTemplate.
func (s ClassSecret) Resolve(vars TemplateVars) (*v1.SecretReference, error) {
	return resolveSecretRef(s.kind, s.t, vars)
}
