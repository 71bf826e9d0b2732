package main

import (
	"flag"
	"fmt"
)

// upstreamVersion is the release of kubernetes-csi/external-provisioner
// whose command line csi-provisioner accepts (see upstreamFlags).
const upstreamVersion = "v6.3.0"

// compatStatus says how csi-provisioner treats one flag of upstream's
// csi-provisioner.
type compatStatus string

const (
	// compatSame: same name, default and behaviour.
	compatSame compatStatus = "same"
	// compatAdded: implemented to upstream's semantics for drop-in use.
	compatAdded compatStatus = "added"
	// compatDiffers: accepted, but the default or the behaviour differs
	// (the note says how).
	compatDiffers compatStatus = "differs"
	// compatIgnored: accepted with any value and without effect, because
	// the feature it tunes is off or absent here (the note says why this is
	// harmless).
	compatIgnored compatStatus = "ignored"
	// compatDefaultOnly: accepted at upstream's default; any other value
	// stops csi-provisioner at start-up with the note as the reason.
	compatDefaultOnly compatStatus = "default only"
)

// upstreamFlag is one flag of upstream's csi-provisioner.
type upstreamFlag struct {
	// name without dashes.
	name string
	// upstreamDefault as upstream's flag package prints it.
	upstreamDefault string
	// ourDefault, when not empty, is csi-provisioner's different default
	// (only with compatDiffers).
	ourDefault string
	status     compatStatus
	// note explains a difference, why a flag is ignored, or why a value
	// other than the default is refused.
	note string
}

// upstreamFlags is every flag of upstream's csi-provisioner (its
// cmd/csi-provisioner/csi-provisioner.go, csi-lib-utils' standardflags
// and component-base's logging flags), in upstream's order. The flag set
// of csi-provisioner is checked against it at start-up (refusals) and in
// tests (names, defaults), and docs/migrating.md is generated from it.
var upstreamFlags = []upstreamFlag{
	{name: "master", upstreamDefault: "", status: compatDefaultOnly,
		note: "an API server URL without a kubeconfig is not supported; use --kubeconfig"},
	{name: "volume-name-prefix", upstreamDefault: "pvc", status: compatSame,
		note: "names the volume and its PV `<prefix>-<claim UID>`, also in `csi.storage.k8s.io/pv/name` and `${pv.name}` (see [Names of volumes and PVs](#names-of-volumes-and-pvs))"},
	{name: "volume-name-uuid-length", upstreamDefault: "-1", status: compatSame,
		note: "the claim UID in the volume's and the PV's names, without dashes, cut to this length"},
	{name: "retry-interval-start", upstreamDefault: "1s", status: compatSame},
	{name: "retry-interval-max", upstreamDefault: "5m0s", status: compatSame},
	{name: "worker-threads", upstreamDefault: "100", status: compatSame},
	{name: "cloning-protection-threads", upstreamDefault: "1", status: compatSame,
		note: "sources (claims and snapshots) whose protection finalizer is checked at once"},
	{name: "snapshot-orphan-sweep-interval", upstreamDefault: "5m0s", status: compatIgnored,
		note: "no sweep is needed: snapshot source-protection finalizers are removed on claim and snapshot events (also those of the initial list after a restart), not by a periodic sweep"},
	{name: "capacity-threads", upstreamDefault: "1", status: compatIgnored,
		note: "the capacity publisher refreshes from one loop (touched segments at once); there is no worker pool to size"},
	{name: "timeout", upstreamDefault: "10s", status: compatSame},
	{name: "strict-topology", upstreamDefault: "false", status: compatSame},
	{name: "immediate-topology", upstreamDefault: "true", status: compatSame},
	{name: "extra-create-metadata", upstreamDefault: "false", status: compatSame},
	{name: "enable-pprof", upstreamDefault: "false", status: compatAdded},
	{name: "default-fstype", upstreamDefault: "", status: compatSame},
	{name: "kube-api-capacity-qps", upstreamDefault: "1", ourDefault: "5", status: compatDiffers,
		note: "same as --capacity-qps; a capacity refresh writes every touched segment's objects at once, which 1 QPS would spread over seconds"},
	{name: "kube-api-capacity-burst", upstreamDefault: "5", ourDefault: "10", status: compatDiffers,
		note: "same as --capacity-burst; see --kube-api-capacity-qps"},
	{name: "enable-capacity", upstreamDefault: "false", status: compatSame},
	{name: "capacity-for-immediate-binding", upstreamDefault: "false", status: compatDefaultOnly,
		note: "capacity is published for delayed-binding classes only, the ones the scheduler reads it for"},
	{name: "capacity-poll-interval", upstreamDefault: "1m0s", status: compatSame},
	{name: "capacity-ownerref-level", upstreamDefault: "1", status: compatDiffers,
		note: "as upstream when POD_NAME and NAMESPACE are set; without them and without the flag, capacity objects get no owner (upstream refuses to start), and --capacity-owner-deployment names the owner instead"},
	{name: "node-deployment", upstreamDefault: "false", status: compatDiffers,
		note: "needs NODE_NAME, as upstream; refused together with --leader-election=true (every node's instance must run); by default its capacity objects are owned by its Node, not by the object --capacity-ownerref-level names (see docs/node-deployment.md)"},
	{name: "node-deployment-immediate-binding", upstreamDefault: "true", status: compatSame},
	{name: "node-deployment-base-delay", upstreamDefault: "20s", status: compatSame},
	{name: "node-deployment-max-delay", upstreamDefault: "1m0s", status: compatSame},
	{name: "controller-publish-readonly", upstreamDefault: "false", status: compatAdded},
	{name: "prevent-volume-mode-conversion", upstreamDefault: "true", status: compatSame,
		note: "a restore into another volume mode than the snapshot's source needs snapshot.storage.kubernetes.io/allow-volume-mode-change=true on its VolumeSnapshotContent"},
	{name: "feature-gates", upstreamDefault: "", status: compatAdded,
		note: "upstream's own gates only; see the feature gates table"},
	{name: "version", upstreamDefault: "false", status: compatSame},
	{name: "kubeconfig", upstreamDefault: "", status: compatDiffers,
		note: "the KUBECONFIG environment variable is not read (upstream lets it override --kubeconfig)"},
	{name: "csi-address", upstreamDefault: "/run/csi/socket", status: compatDiffers,
		note: "a unix socket only (a path or unix:///path); other gRPC targets are refused at start-up"},
	{name: "leader-election", upstreamDefault: "false", status: compatSame},
	{name: "leader-election-namespace", upstreamDefault: "", status: compatSame},
	{name: "leader-election-lease-duration", upstreamDefault: "15s", status: compatSame},
	{name: "leader-election-renew-deadline", upstreamDefault: "10s", status: compatSame},
	{name: "leader-election-retry-period", upstreamDefault: "5s", status: compatSame},
	{name: "leader-election-labels", upstreamDefault: "", status: compatDefaultOnly,
		note: "labels on the leader-election Lease are not implemented"},
	{name: "kube-api-qps", upstreamDefault: "5", ourDefault: "20", status: compatDiffers,
		note: "one Event per volume goes through a client of its own with the same budget; 20 keeps a burst of claims from waiting on the client"},
	{name: "kube-api-burst", upstreamDefault: "10", ourDefault: "40", status: compatDiffers,
		note: "see --kube-api-qps"},
	{name: "http-endpoint", upstreamDefault: "", status: compatSame,
		note: "serves /metrics, /healthz/leader-election (alive) and also /livez, /healthz and /readyz"},
	{name: "metrics-address", upstreamDefault: "", status: compatAdded,
		note: "deprecated upstream: the same server as --http-endpoint, which it excludes"},
	{name: "metrics-path", upstreamDefault: "/metrics", status: compatAdded},
	{name: "automaxprocs", upstreamDefault: "", status: compatIgnored,
		note: "the Go runtime (1.25 and later) already sets GOMAXPROCS from the container's CPU limit"},
	{name: "v", upstreamDefault: "0", status: compatSame},
	{name: "vmodule", upstreamDefault: "", status: compatSame},
	{name: "logging-format", upstreamDefault: "text", status: compatSame},
	{name: "log-flush-frequency", upstreamDefault: "5s", status: compatSame},
	{name: "log-text-split-stream", upstreamDefault: "false", status: compatSame},
	{name: "log-text-info-buffer-size", upstreamDefault: "0", status: compatSame},
	{name: "log-json-split-stream", upstreamDefault: "false", status: compatSame},
	{name: "log-json-info-buffer-size", upstreamDefault: "0", status: compatSame},
}

// addUpstreamOnlyFlags registers the upstream flags that csi-provisioner
// accepts without using their values (compatIgnored, compatDefaultOnly),
// with upstream's types and defaults so that a value upstream accepts
// parses here too.
func addUpstreamOnlyFlags(fs *flag.FlagSet) {
	compat := func(name string) string {
		for _, f := range upstreamFlags {
			if f.name == name {
				return fmt.Sprintf("Accepted for compatibility with external-provisioner %s (%s): %s.", upstreamVersion, f.status, f.note)
			}
		}
		panic("no upstream flag " + name) // a programming error, caught by the tests
	}
	fs.String("master", "", compat("master"))
	fs.Duration("snapshot-orphan-sweep-interval", defaultSnapshotSweep, compat("snapshot-orphan-sweep-interval"))
	fs.Uint("capacity-threads", 1, compat("capacity-threads"))
	fs.Bool("capacity-for-immediate-binding", false, compat("capacity-for-immediate-binding"))
	fs.String("leader-election-labels", "", compat("leader-election-labels"))
	fs.BoolFunc("automaxprocs", compat("automaxprocs"), parseOptionalBool)
}

// checkUpstreamFlags refuses the upstream flags that were given with a
// value csi-provisioner cannot honour: one line naming the flag and why.
func checkUpstreamFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		for _, u := range upstreamFlags {
			if u.name == f.Name && u.status == compatDefaultOnly && f.Value.String() != f.DefValue {
				err = fmt.Errorf("--%s=%s is not supported: %s", f.Name, f.Value.String(), u.note)
			}
		}
	})
	return err
}
