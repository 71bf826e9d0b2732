package provisioner

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Reserved StorageClass parameter keys. Keys with this prefix are consumed by
// the provisioner and never reach the driver.
const (
	csiParameterPrefix = "csi.storage.k8s.io/"

	paramFSType = csiParameterPrefix + "fstype"

	// Extra create metadata keys, added with Config.ExtraCreateMetadata.
	paramPVCName      = csiParameterPrefix + "pvc/name"
	paramPVCNamespace = csiParameterPrefix + "pvc/namespace"
	paramPVName       = csiParameterPrefix + "pv/name"
)

// ErrInvalidParameter marks a StorageClass parameter error: a configuration
// error that retrying cannot fix until the class is corrected.
var ErrInvalidParameter = errors.New("invalid StorageClass parameter")

// classParameters is a StorageClass's parameters split into what the
// provisioner consumes and what goes to CreateVolume.
type classParameters struct {
	// driver holds the parameters passed to the driver, prefixed keys removed.
	driver map[string]string
	// fsType is the class's fstype, or "".
	fsType string
	// secrets holds the secret references, by kind, as templates.
	secrets map[secretKind]secretTemplate
}

// parseClassParameters splits class parameters. Unknown keys with the
// csi.storage.k8s.io/ prefix are rejected, so that a typo in a secret or
// fstype key is reported instead of silently ignored.
func parseClassParameters(params map[string]string) (classParameters, error) {
	out := classParameters{
		driver:  make(map[string]string, len(params)),
		secrets: map[secretKind]secretTemplate{},
	}
	var unknown []string
	for k, v := range params {
		if !strings.HasPrefix(k, csiParameterPrefix) {
			out.driver[k] = v
			continue
		}
		if k == paramFSType {
			out.fsType = v
			continue
		}
		if kind, field, ok := secretParameter(k); ok {
			t := out.secrets[kind]
			if field == secretFieldName {
				t.name, t.nameSet = v, true
			} else {
				t.namespace, t.namespaceSet = v, true
			}
			out.secrets[kind] = t
			continue
		}
		unknown = append(unknown, k)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return classParameters{}, fmt.Errorf("%w: unknown key(s) %s (keys with prefix %q are reserved for the provisioner)",
			ErrInvalidParameter, strings.Join(unknown, ", "), csiParameterPrefix)
	}
	for kind, t := range out.secrets {
		if t.nameSet != t.namespaceSet {
			return classParameters{}, fmt.Errorf("%w: %s secret needs both %q and %q",
				ErrInvalidParameter, kind, kind.param(secretFieldName), kind.param(secretFieldNamespace))
		}
	}
	return out, nil
}
