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

// deprecatedFSType is upstream's old, unprefixed fstype key, matched in any
// case ("fstype", "fsType", ...). It sets the filesystem type like
// paramFSType and, being unprefixed, is also passed to the driver, as
// upstream does.
const deprecatedFSType = "fstype"

// classParameters is a StorageClass's parameters split into what the
// provisioner consumes and what goes to CreateVolume.
type classParameters struct {
	// driver holds the parameters passed to the driver: every key without
	// the csi.storage.k8s.io/ prefix, deprecated ones included.
	driver map[string]string
	// fsType is the class's fstype, or "".
	fsType string
	// secrets holds the secret references, by kind, as templates (the
	// default secret already applied to the kinds the class does not name).
	secrets map[secretKind]secretTemplate
	// deprecated lists the deprecated keys the class uses, sorted by key.
	deprecated []deprecatedParameter
}

// deprecatedParameter is a deprecated key a class uses and the key that
// replaces it.
type deprecatedParameter struct {
	key, use string
}

// parseClassParameters splits class parameters. Unknown keys with the
// csi.storage.k8s.io/ prefix are rejected, so that a typo in a secret or
// fstype key is reported instead of silently ignored; so is a filesystem
// type or a secret field set by two keys (a deprecated and a current one),
// as upstream.
func parseClassParameters(params map[string]string) (classParameters, error) {
	out := classParameters{driver: make(map[string]string, len(params))}
	secrets := secretKeys{}
	var unknown, fsKeys []string
	for k, v := range params {
		slot, isSecret := secretParameter(k)
		switch {
		case k == paramFSType || strings.ToLower(k) == deprecatedFSType:
			out.fsType = v
			fsKeys = append(fsKeys, k)
		case isSecret:
			secrets.add(slot, k, v)
		case strings.HasPrefix(k, csiParameterPrefix):
			unknown = append(unknown, k)
		}
		if strings.HasPrefix(k, csiParameterPrefix) {
			continue
		}
		out.driver[k] = v
		if isSecret {
			out.deprecated = append(out.deprecated, deprecatedParameter{key: k, use: slot.kind.param(slot.field)})
		} else if strings.ToLower(k) == deprecatedFSType {
			out.deprecated = append(out.deprecated, deprecatedParameter{key: k, use: paramFSType})
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return classParameters{}, fmt.Errorf("%w: unknown key(s) %s (keys with prefix %q are reserved for the provisioner)",
			ErrInvalidParameter, strings.Join(unknown, ", "), csiParameterPrefix)
	}
	if len(fsKeys) > 1 {
		sort.Strings(fsKeys)
		return classParameters{}, fmt.Errorf("%w: the filesystem type is set by %s: use only %q",
			ErrInvalidParameter, strings.Join(fsKeys, " and "), paramFSType)
	}
	var err error
	if out.secrets, err = secrets.templates(); err != nil {
		return classParameters{}, err
	}
	sort.Slice(out.deprecated, func(i, j int) bool { return out.deprecated[i].key < out.deprecated[j].key })
	return out, nil
}

// driverParameters returns the parameters a class passes to the driver
// (capacity.Config.DriverParameters): capacity publishing asks GetCapacity
// with the ones CreateVolume gets, and refuses the classes Provision
// refuses.
func driverParameters(params map[string]string) (map[string]string, error) {
	parsed, err := parseClassParameters(params)
	return parsed.driver, err
}
