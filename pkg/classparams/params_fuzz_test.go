package classparams

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzClassParameters feeds arbitrary class parameters ("key=value" lines)
// and claim fields to Parse and the secret templates: no
// panic; errors are ErrInvalidParameter or ErrSecretTemplate; reserved keys
// never reach the driver; a resolved secret reference has a valid namespace
// and name, and its namespace never comes from the claim's name or
// annotations (which the claim's user chooses).
func FuzzClassParameters(f *testing.F) {
	f.Add("csi.storage.k8s.io/provisioner-secret-name=s-${pvc.name}\ncsi.storage.k8s.io/provisioner-secret-namespace=${pvc.namespace}\npool=gold", "data-0", "ns1", "k", "v")
	f.Add("csi.storage.k8s.io/node-stage-secret-name=${pvc.annotations['k']}\ncsi.storage.k8s.io/node-stage-secret-namespace=${pv.name}", "c", "ns", "k", "Secret")
	f.Add("csi.storage.k8s.io/controller-publish-secret-namespace=${pvc.name}\ncsi.storage.k8s.io/controller-publish-secret-name=x", "c", "ns", "", "")
	f.Add("csi.storage.k8s.io/fstype=xfs\ncsi.storage.k8s.io/unknown=1", "c", "ns", "", "")
	f.Add("csi.storage.k8s.io/provisioner-secret-name=${}\ncsi.storage.k8s.io/provisioner-secret-namespace=${pvc.annotations['']}", "c", "ns", "", "")
	f.Fuzz(func(t *testing.T, lines, pvcName, pvcNamespace, annKey, annValue string) {
		params := map[string]string{}
		for _, l := range strings.Split(lines, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				params[k] = v
			}
		}
		parsed, err := Parse(params)
		if err != nil {
			if !errors.Is(err, ErrInvalidParameter) {
				t.Fatalf("error %v is not ErrInvalidParameter", err)
			}
			return
		}
		for k := range parsed.Driver {
			if strings.HasPrefix(k, Prefix) {
				t.Fatalf("reserved key %q passed to the driver", k)
			}
		}
		vars := TemplateVars{PVName: "pvc-0a1b2c3d", PVCName: pvcName, PVCNamespace: pvcNamespace,
			PVCAnnotations: map[string]string{annKey: annValue}}
		refs, err := secretRefs(parsed.secrets, vars)
		if err != nil {
			if !errors.Is(err, ErrSecretTemplate) {
				t.Fatalf("error %v is not ErrSecretTemplate", err)
			}
			return
		}
		for kind, ref := range refs {
			if ref == nil {
				continue
			}
			if msgs := validation.IsDNS1123Label(ref.Namespace); len(msgs) > 0 {
				t.Fatalf("%s: invalid namespace %q accepted", kind, ref.Namespace)
			}
			if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
				t.Fatalf("%s: invalid name %q accepted", kind, ref.Name)
			}
			if tmpl := parsed.secrets[kind].namespace; strings.Contains(tmpl, "${pvc.name}") || strings.Contains(tmpl, "${pvc.annotations") {
				t.Fatalf("%s: namespace template %q with claim-chosen variables accepted", kind, tmpl)
			}
		}
	})
}
