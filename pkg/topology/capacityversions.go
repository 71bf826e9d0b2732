package topology

import (
	"sort"
	"strconv"
	"strings"
)

// AnnCapacityVersions is the PV annotation in which csi-provisioner records,
// for each CSIStorageCapacity object it refreshed right after creating the
// volume, the object's resourceVersion at that moment: "ns/name=rv,...".
// A scheduler that holds a reservation for the claim keeps it until its
// capacity informer has seen those versions, so that at every moment the
// volume is counted by one of the two: the reservation or the published
// capacity.
const AnnCapacityVersions = "csi-topology-provisioner.io/capacity-versions"

// FormatCapacityVersions renders object key → resourceVersion for
// AnnCapacityVersions, sorted so the value is stable.
func FormatCapacityVersions(versions map[string]string) string {
	keys := make([]string, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+versions[k])
	}
	return strings.Join(parts, ",")
}

// ParseCapacityVersions reads an AnnCapacityVersions value; malformed parts
// are skipped.
func ParseCapacityVersions(value string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(value, ",") {
		key, rv, ok := strings.Cut(part, "=")
		if ok && key != "" && rv != "" {
			out[key] = rv
		}
	}
	return out
}

// VersionReached reports whether an observed resourceVersion is at least
// want. kube-apiserver's resourceVersions are etcd revisions, so they are
// compared as numbers; when either is not a number (another storage), the
// version is taken as reached, so that nothing waits forever on a
// comparison that cannot be made.
func VersionReached(observed, want string) bool {
	o, err1 := strconv.ParseUint(observed, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return o >= w
}
