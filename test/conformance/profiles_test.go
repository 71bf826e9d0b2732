package conformance

import (
	"slices"
	"strconv"
	"strings"
)

// profile names a set of provisioner flags; every profile runs one
// provisioner and one mock controller per side, with a driver name of its
// own.
type profile string

const (
	profileDefault     profile = "default"
	profileStrict      profile = "strict"
	profileNoImmediate profile = "noimmediate"
	profileVolumeName  profile = "volname"
	profileFSType      profile = "fstype"
	profileReadOnly    profile = "readonly"
	profileCapacity    profile = "capacity"
	profileLeader      profile = "leader"
	profileNode        profile = "node"
	profileXNS         profile = "xns"
	profileSlowProbe   profile = "slowprobe"
)

// profileSpec declares a profile: the flags both sides add to the shared
// ones, and which cases of the default profile run again in it.
type profileSpec struct {
	// flags are both sides' provisioner flags.
	flags []string
	// upstreamFlags are upstream's only: a flag ours refuses at start
	// (the difference the profile's cases show is allowlisted).
	upstreamFlags []string
	// env is both provisioners' environment.
	env []string
	// mockArgs are the mock driver's extra flags.
	mockArgs []string
	// mockFaults, when set, are the mock driver's fault rules from its
	// start (its --faults-file, JSON).
	mockFaults string
	// cases names the cases of the default profile that also run in this
	// one, as "<case>@<profile>"; podZone, when set, moves their pods there.
	cases   []string
	podZone string
	// capacity records the CSIStorageCapacity objects of a case's class.
	capacity bool
}

// profiles are every profile but profileMigration (migration_test.go).
var profiles = map[profile]profileSpec{
	profileDefault:     {},
	profileStrict:      {flags: []string{"--strict-topology"}},
	profileNoImmediate: {flags: []string{"--immediate-topology=false"}},
	profileVolumeName: {flags: []string{"--volume-name-prefix=k8s", "--volume-name-uuid-length=10"},
		cases: []string{"fstype/none", "delete/reclaim-delete", "source/clone", "source/snapshot", "size/too-large",
			"secret/controller-publish/template-pv-name", "topology/default/wffc"}},
	profileFSType: {flags: []string{"--default-fstype=ext4"},
		cases: []string{"fstype/prefixed", "fstype/none", "fstype/block", "mode/filesystem/[ReadWriteOnce]", "mode/block/[ReadWriteOnce]"}},
	profileReadOnly: {flags: []string{"--controller-publish-readonly"},
		cases: []string{"mode/filesystem/[ReadWriteOnce]", "mode/filesystem/[ReadOnlyMany]", "mode/filesystem/[ReadWriteOnce ReadOnlyMany]",
			"mode/block/[ReadOnlyMany]"}},
	profileCapacity: {flags: []string{"--enable-capacity", "--capacity-ownerref-level=-1", "--capacity-poll-interval=5s"},
		env: []string{"NAMESPACE=default"}, capacity: true,
		cases: []string{"topology/default/immediate", "topology/default/wffc", "topology/default/wffc-allowed"}},
	profileLeader: {flags: []string{"--leader-election", "--leader-election-namespace=default"},
		cases: []string{"fstype/none", "topology/default/wffc", "delete/reclaim-delete"}},
	profileNode: {flags: []string{"--node-deployment", "--node-deployment-immediate-binding=false"}, env: []string{"NODE_NAME=node-z1"},
		mockArgs: []string{"--mode=both", "--node-id=node-z1", "--node-topology=" + zoneKey + "=z1"},
		cases:    []string{"topology/default/wffc", "topology/default/wffc-allowed", "source/clone-wffc"}, podZone: "z1"},
	// A driver whose Probe takes 3 s: upstream bounds its start-up Probe by
	// --timeout (10 s here), and so does ours.
	profileSlowProbe: {mockFaults: `[{"method": "Probe", "latency": "3s"}]`,
		cases: []string{"fstype/none", "topology/default/wffc", "delete/reclaim-delete"}},
	profileXNS: {upstreamFlags: []string{"--feature-gates=Topology=true,CrossNamespaceVolumeDataSource=true"}},
}

// profileCases returns the cases of each profile's list, named
// "<case>@<profile>", from the default profile's cases in cs.
func profileCases(cs []tcase) []tcase {
	var out []tcase
	for p, spec := range profiles {
		for _, tc := range cs {
			if (tc.profile != "" && tc.profile != profileDefault) || !slices.Contains(spec.cases, tc.name) {
				continue
			}
			tc.name, tc.profile = tc.name+"@"+string(p), p
			if spec.podZone != "" && tc.podZone != "" {
				tc.podZone = spec.podZone
			}
			out = append(out, tc)
		}
	}
	slices.SortFunc(out, func(a, b tcase) int { return strings.Compare(a.name, b.name) })
	return out
}

// flagValue is the value of --name in flags, "" when absent.
func flagValue(flags []string, name string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// volumeName is the CSI volume name of a claim in a profile, as both
// provisioners make it: <prefix>-<UID>, or with --volume-name-uuid-length
// the UID without dashes cut to that length.
func volumeName(p profile, uid string) string {
	prefix := flagValue(profiles[p].flags, "volume-name-prefix")
	if prefix == "" {
		prefix = "pvc"
	}
	if n, err := strconv.Atoi(flagValue(profiles[p].flags, "volume-name-uuid-length")); err == nil && n > 0 {
		return prefix + "-" + cutUID(uid, n)
	}
	return prefix + "-" + uid
}

// cutUID is the UID without dashes, cut to n characters.
func cutUID(uid string, n int) string {
	u := strings.ReplaceAll(uid, "-", "")
	return u[:min(n, len(u))]
}
