package classparams

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Reserved StorageClass parameter keys, upstream's. Keys with this prefix
// are consumed by the provisioner and never reach the driver.
const (
	// Prefix is the prefix of the reserved keys.
	Prefix = "csi.storage.k8s.io/"

	// FSTypeKey sets the volume's filesystem type.
	FSTypeKey = Prefix + "fstype"

	// PVCNameKey, PVCNamespaceKey and PVNameKey are the extra create
	// metadata the provisioner adds to CreateVolume's parameters with
	// --extra-create-metadata.
	PVCNameKey      = Prefix + "pvc/name"
	PVCNamespaceKey = Prefix + "pvc/namespace"
	PVNameKey       = Prefix + "pv/name"
)

// ErrInvalidParameter marks a StorageClass parameter error: a configuration
// error that retrying cannot fix until the class is corrected.
var ErrInvalidParameter = errors.New("invalid StorageClass parameter")

// deprecatedFSType is upstream's old, unprefixed fstype key, matched in any
// case ("fstype", "fsType", ...). It sets the filesystem type like
// FSTypeKey and, being unprefixed, is also passed to the driver, as
// upstream does.
const deprecatedFSType = "fstype"

// Parameters is a StorageClass's parameters split into what the
// provisioner consumes and what goes to CreateVolume (Parse).
type Parameters struct {
	// Driver holds the parameters passed to the driver: every key without
	// the csi.storage.k8s.io/ prefix, deprecated ones included. It is the
	// caller's to extend.
	Driver map[string]string
	// FSType is the class's fstype, or "".
	FSType string
	// Deprecated lists the deprecated keys the class uses, sorted by key.
	Deprecated []DeprecatedKey
	// secrets holds the secret references, by kind, as templates (the
	// default secret already applied to the kinds the class does not name).
	secrets map[SecretKind]secretTemplate
}

// DeprecatedKey is a deprecated key a class uses and the key that
// replaces it.
type DeprecatedKey struct {
	// Key is the deprecated key, Use the key to use instead.
	Key, Use string
}

// Parse splits class parameters. Unknown keys with the
// csi.storage.k8s.io/ prefix are rejected, so that a typo in a secret or
// fstype key is reported instead of silently ignored; so is a filesystem
// type or a secret field set by two keys (a deprecated and a current one),
// as upstream.
func Parse(params map[string]string) (Parameters, error) {
	out := Parameters{Driver: make(map[string]string, len(params))}
	secrets := secretKeys{}
	var unknown, fsKeys []string
	for k, v := range params {
		slot, isSecret := secretParameter(k)
		switch {
		case k == FSTypeKey || strings.ToLower(k) == deprecatedFSType:
			out.FSType = v
			fsKeys = append(fsKeys, k)
		case isSecret:
			secrets.add(slot, k, v)
		case strings.HasPrefix(k, Prefix):
			unknown = append(unknown, k)
		}
		if strings.HasPrefix(k, Prefix) {
			continue
		}
		out.Driver[k] = v
		if isSecret {
			out.Deprecated = append(out.Deprecated, DeprecatedKey{Key: k, Use: slot.kind.param(slot.field)})
		} else if strings.ToLower(k) == deprecatedFSType {
			out.Deprecated = append(out.Deprecated, DeprecatedKey{Key: k, Use: FSTypeKey})
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Parameters{}, fmt.Errorf("%w: unknown key(s) %s (keys with prefix %q are reserved for the provisioner)",
			ErrInvalidParameter, strings.Join(unknown, ", "), Prefix)
	}
	if len(fsKeys) > 1 {
		sort.Strings(fsKeys)
		return Parameters{}, fmt.Errorf("%w: the filesystem type is set by %s: use only %q",
			ErrInvalidParameter, strings.Join(fsKeys, " and "), FSTypeKey)
	}
	var err error
	if out.secrets, err = secrets.templates(); err != nil {
		return Parameters{}, err
	}
	sort.Slice(out.Deprecated, func(i, j int) bool { return out.Deprecated[i].Key < out.Deprecated[j].Key })
	return out, nil
}

// DriverParameters returns the parameters a class passes to the driver
// (capacity.Config.DriverParameters): capacity publishing asks GetCapacity
// with the ones CreateVolume gets, and refuses the classes Provision
// refuses.
func DriverParameters(params map[string]string) (map[string]string, error) {
	parsed, err := Parse(params)
	return parsed.Driver, err
}
