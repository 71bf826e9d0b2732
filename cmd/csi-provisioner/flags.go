package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/logging"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/capacity"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodedeploy"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/nodelabel"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// config is everything csi-provisioner's flags say.
type config struct {
	csiAddress   string
	kubeconfig   string
	kubeAPIQPS   float64
	kubeAPIBurst int
	// httpEndpoint and metricsAddress (upstream's deprecated name) are the
	// same server; at most one is set.
	httpEndpoint   string
	metricsAddress string
	metricsPath    string
	enablePprof    bool
	showVersion    bool
	controller     provisioner.ControllerConfig
	probeTimeout   time.Duration
	featureGates   featureGates

	enableCapacity bool
	capacity       capacity.Config
	capacityOwner  string
	// capacityOwnerLevel is --capacity-ownerref-level; capacityOwnerLevelSet
	// says whether it was given.
	capacityOwnerLevel    int
	capacityOwnerLevelSet bool
	// podName and podNamespace are $POD_NAME and $NAMESPACE, where the
	// owner lookup of capacity objects starts.
	podName, podNamespace string
	capacityQPS           float64
	capacityBurst         int
	// cloningProtectionThreads is upstream's --cloning-protection-threads.
	cloningProtectionThreads uint
	// inFlightRecord is --in-flight-record (ControllerConfig.DisableInFlightRecord
	// is its negation).
	inFlightRecord bool
	// nodeDeployment is --node-deployment; node holds its tuning and
	// $NODE_NAME (the topology comes from the driver at start-up).
	nodeDeployment bool
	node           nodedeploy.Config
	// releasePages is $CSI_PROVISIONER_RELEASE_STARTUP_PAGES, by default
	// nodeDeployment (releaseStartupPages).
	releasePages bool
	// nodeSelection is --node-deployment-selection: "all" or "label"
	// (node.LabelSelection).
	nodeSelection string
	// removeRecords is --remove-in-flight-records (a one-shot run, see
	// rollback.go); recordsDriver is --remove-in-flight-records-driver.
	removeRecords bool
	recordsDriver string
}

// newFlagSet registers every flag of csi-provisioner on a new FlagSet
// that fills c: its own, and those of upstream external-provisioner that it
// accepts (upstreamFlags).
func newFlagSet(c *config) (*flag.FlagSet, *logging.Options) {
	fs := flag.NewFlagSet("csi-provisioner", flag.ContinueOnError)
	logOpts := logging.AddFlags(fs)
	p := &c.controller.Provisioner
	fs.StringVar(&c.csiAddress, "csi-address", "/run/csi/socket", "The CSI driver's controller socket: an absolute path or unix:///absolute/path. Waited for until it accepts connections.")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 20, "QPS of the API client (Events have a budget of their own of the same size).")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 40, "Burst of the API client.")
	fs.StringVar(&c.httpEndpoint, "http-endpoint", "", "Address (host:port) serving /metrics, /livez (the process runs), /healthz/leader-election (the same, upstream's liveness path), /healthz (the driver is connected and ready) and /readyz (the driver is connected and this replica leads); empty disables it.")
	fs.StringVar(&c.metricsAddress, "metrics-address", "", "Deprecated (as upstream): the same as --http-endpoint; only one of the two may be set.")
	fs.StringVar(&c.metricsPath, "metrics-path", "/metrics", "HTTP path of the metrics on --http-endpoint.")
	fs.BoolVar(&c.enablePprof, "enable-pprof", false, "Serve Go profiling (net/http/pprof) under /debug/pprof/ on --http-endpoint.")
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	c.featureGates = featureGates{}
	fs.Var(c.featureGates, "feature-gates", featureGatesUsage())
	c.podName, c.podNamespace = os.Getenv("POD_NAME"), os.Getenv("NAMESPACE")
	fs.DurationVar(&p.Timeout, "timeout", 10*time.Second, "Timeout of each CSI call.")
	fs.DurationVar(&c.probeTimeout, "probe-timeout", 0, "Timeout of one driver Probe at start-up (retried until the driver is ready); 0 means --timeout, as upstream.")
	fs.DurationVar(&c.controller.DrainTimeout, "drain-timeout", provisioner.DefaultDrainTimeout, "On SIGTERM, how long the CreateVolume calls in flight get to end (their PVs written, their in-flight records removed) before the process exits; no new one starts meanwhile. Keep it below the pod's terminationGracePeriodSeconds (30 s by default). See docs/operations.md, \"The in-flight record\".")
	fs.IntVar(&c.controller.WorkerThreads, "worker-threads", 100, "Claims and volumes processed at once.")
	fs.DurationVar(&c.controller.RetryIntervalStart, "retry-interval-start", time.Second, "First retry interval of a failed provision or delete; doubles on each failure.")
	fs.DurationVar(&c.controller.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Largest retry interval of a failed provision or delete; a claim the driver refused with INVALID_ARGUMENT waits this long before its next attempt.")
	fs.BoolVar(&p.StrictTopology, "strict-topology", false, "Delayed binding: requisite and preferred topology are exactly the selected node's segment.")
	fs.BoolVar(&p.ImmediateTopology, "immediate-topology", true, "Immediate binding without allowedTopologies: send all known segments as requisite topology.")
	fs.BoolVar(&p.ExtraCreateMetadata, "extra-create-metadata", false, "Add PVC name/namespace and PV name to CreateVolume parameters.")
	fs.BoolVar(&p.PreventVolumeModeConversion, "prevent-volume-mode-conversion", true, "Refuse to restore a snapshot into another volume mode than its source had, unless its VolumeSnapshotContent carries snapshot.storage.kubernetes.io/allow-volume-mode-change=true.")
	fs.UintVar(&c.cloningProtectionThreads, "cloning-protection-threads", 1, "Data sources (claims, snapshots) whose protection finalizer is checked at once; 0 means 1.")
	fs.BoolVar(&p.ControllerPublishReadOnly, "controller-publish-readonly", false, "Mark the PV read-only (spec.csi.readOnly) when the claim's only access mode is ReadOnlyMany, so that ControllerPublishVolume is called read-only.")
	fs.StringVar(&p.DefaultFSType, "default-fstype", "", "Filesystem type when the class sets none.")
	fs.StringVar(&p.VolumeNamePrefix, "volume-name-prefix", "pvc", "Prefix of the names of created volumes and of their PVs.")
	fs.IntVar(&p.VolumeNameUUIDLength, "volume-name-uuid-length", -1, "Truncate the PVC UID (dashes removed) in volume and PV names to this length; -1 keeps it whole.")
	fs.BoolVar(&c.controller.LeaderElection, "leader-election", false, "Provision only while holding a leader-election Lease.")
	fs.StringVar(&c.controller.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease (default: the pod's namespace).")
	fs.DurationVar(&c.controller.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "Leader-election lease duration.")
	fs.DurationVar(&c.controller.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "Leader-election renew deadline.")
	fs.DurationVar(&c.controller.RetryPeriod, "leader-election-retry-period", 5*time.Second, "Leader-election retry period.")
	fs.BoolVar(&c.enableCapacity, "enable-capacity", false, "Publish CSIStorageCapacity objects per (segment, delayed-binding class of the driver).")
	fs.DurationVar(&c.capacity.PollInterval, "capacity-poll-interval", time.Minute, "Refresh every capacity object this often (touched segments at once).")
	fs.StringVar(&c.capacity.Namespace, "capacity-namespace", os.Getenv("NAMESPACE"), "Namespace of the CSIStorageCapacity objects (default: $NAMESPACE, else \"default\").")
	fs.StringVar(&c.capacityOwner, "capacity-owner-deployment", "", "Deployment (in --capacity-namespace) that owns the capacity objects; excludes --capacity-ownerref-level.")
	fs.IntVar(&c.capacityOwnerLevel, "capacity-ownerref-level", 1, "Owner of the capacity objects, as upstream: the object this many levels up from the pod $POD_NAME in $NAMESPACE (0 the pod, 1 its ReplicaSet or StatefulSet, 2 a Deployment, -1 no owner). Without $POD_NAME and without the flag: no owner.")
	fs.Float64Var(&c.capacityQPS, "capacity-qps", 5, "QPS of the capacity publisher's own API client.")
	fs.IntVar(&c.capacityBurst, "capacity-burst", 10, "Burst of the capacity publisher's own API client.")
	fs.Float64Var(&c.capacityQPS, "kube-api-capacity-qps", 5, "Upstream's name of --capacity-qps (upstream's default is 1).")
	fs.IntVar(&c.capacityBurst, "kube-api-capacity-burst", 10, "Upstream's name of --capacity-burst (upstream's default is 5).")
	fs.BoolVar(&c.inFlightRecord, "in-flight-record", true, "Record on each claim, before its first CreateVolume, that a volume of its name may exist (finalizer "+inflight.Finalizer+"), and delete that volume when the claim is deleted before it has a PV. false is UNSAFE: volumes leak as with upstream external-provisioner (its issues #486, #1469); it exists to show those leaks. See docs/operations.md.")
	fs.BoolVar(&c.controller.BindThrough, "bind-through", false, "Bind each claim to its new PV right after creating it, writing what kube-controller-manager's PV controller would write, in --worker-threads parallel workers, with an API rate budget of their own, three times --kube-api-qps and --kube-api-burst (three writes per claim), so that claims are Bound at the provisioner's pace; the PV controller then finds nothing to write. Needs update on persistentvolumes/status, persistentvolumeclaims and persistentvolumeclaims/status (deploy/'s base RBAC grants them); without them the PV controller binds, as with false. See docs/configuration.md, \"Bind-through\".")
	c.node.NodeName = os.Getenv("NODE_NAME")
	fs.BoolVar(&c.nodeDeployment, "node-deployment", false, "Run as the instance of one node, beside a node-local driver ($NODE_NAME): provision only claims selected for that node, delete only its volumes, no leader election. See docs/node-deployment.md.")
	fs.BoolVar(&c.node.ImmediateBinding, "node-deployment-immediate-binding", true, "With --node-deployment: take immediate-binding claims for this node (the instances race; one wins).")
	fs.DurationVar(&c.node.BaseDelay, "node-deployment-base-delay", defaultNodeBaseDelay, "With --node-deployment: wait a random time up to this long before trying to take an immediate-binding claim.")
	fs.DurationVar(&c.node.MaxDelay, "node-deployment-max-delay", defaultNodeMaxDelay, "With --node-deployment: the longest wait before trying again to take an immediate-binding claim (it doubles after each lost race).")
	fs.StringVar(&c.nodeSelection, "node-deployment-selection", "all", "With --node-deployment: which claims and PVs this instance lists and watches. all: every one of the cluster (as upstream). label: only those labelled "+nodelabel.Key+" with this node (and the driver's pool of unselected immediate-binding claims), selected by the API server; needs csi-node-router, which labels what the instances do not. See docs/node-deployment.md, \"Selection by label\".")
	fs.BoolVar(&c.removeRecords, "remove-in-flight-records", false, "Run once, before a rollback to upstream external-provisioner (which never removes the in-flight finalizer), and exit: hold the leader-election Lease (with --leader-election), then remove "+inflight.Finalizer+" from every claim of the driver. Being deleted without a PV: its volume is deleted through the driver first, and the claim keeps the finalizer when the driver is not reachable. Prints a summary; exits 1 when claims keep it. Same flags as the sidecar otherwise. See docs/operations.md, \"Rolling back to upstream\".")
	fs.StringVar(&c.recordsDriver, "remove-in-flight-records-driver", "", "With --remove-in-flight-records: the driver's name, for when its socket (--csi-address) is not reachable within 30 s; when it is, the two must agree.")
	addUpstreamOnlyFlags(fs)
	return fs, logOpts
}

// parseFlags parses args into a config, refuses what csi-provisioner
// cannot honour, and configures logging (once per process).
func parseFlags(args []string) (config, error) {
	c, logOpts, err := parseArgs(args, os.Stderr)
	if err != nil {
		return c, err
	}
	return c, logOpts.Apply()
}

// parseArgs is parseFlags without configuring logging; usage and parse
// errors are written to output.
func parseArgs(args []string, output io.Writer) (config, *logging.Options, error) {
	var c config
	fs, logOpts := newFlagSet(&c)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	if c.capacity.Namespace == "" {
		c.capacity.Namespace = "default"
	}
	// Upstream bounds each start-up Probe by --timeout.
	if c.probeTimeout <= 0 {
		c.probeTimeout = c.controller.Provisioner.Timeout
	}
	if c.controller.LeaderElectionNamespace == "" {
		c.controller.LeaderElectionNamespace = kubeclient.ServiceAccountNamespace(kubeclient.ServiceAccountNamespaceFile)
	}
	if fs.NArg() > 0 {
		return c, nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := checkUpstreamFlags(fs); err != nil {
		return c, nil, err
	}
	if err := c.featureGates.validate(); err != nil {
		return c, nil, fmt.Errorf("--feature-gates: %w", err)
	}
	fs.Visit(func(f *flag.Flag) {
		c.capacityOwnerLevelSet = c.capacityOwnerLevelSet || f.Name == "capacity-ownerref-level"
	})
	c.node.LabelSelection = c.nodeSelection == "label"
	release, err := releaseStartupPages(c.nodeDeployment, os.Getenv)
	if err != nil {
		return c, nil, err
	}
	c.releasePages = release
	return c, logOpts, c.validate()
}

// validate checks what parseFlags can check without I/O.
func (c config) validate() error {
	if _, err := driverconn.SocketPath(c.csiAddress); err != nil {
		return fmt.Errorf("--csi-address: %w", err)
	}
	if c.kubeAPIQPS <= 0 || c.kubeAPIBurst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	if c.httpEndpoint != "" && c.metricsAddress != "" {
		return errors.New("only one of --metrics-address and --http-endpoint can be set")
	}
	if c.controller.WorkerThreads <= 0 {
		return errors.New("--worker-threads must be positive")
	}
	if c.recordsDriver != "" && !c.removeRecords {
		return errors.New("--remove-in-flight-records-driver needs --remove-in-flight-records")
	}
	if c.nodeDeployment {
		switch {
		case c.node.NodeName == "":
			return errors.New("--node-deployment needs the NODE_NAME environment variable: the name of the node this instance runs on (the pod's spec.nodeName through the downward API)")
		case c.controller.LeaderElection:
			return errors.New("--node-deployment and --leader-election=true exclude each other: every node's instance must provision its own node's claims, and a leader would stop all but one")
		case c.node.BaseDelay <= 0 || c.node.MaxDelay < c.node.BaseDelay:
			return errors.New("--node-deployment-base-delay must be positive and at most --node-deployment-max-delay")
		}
	}
	if c.nodeSelection != "all" && c.nodeSelection != "label" {
		return fmt.Errorf("--node-deployment-selection=%q: want all or label", c.nodeSelection)
	}

	if c.enableCapacity {
		if _, err := c.ownerLevel(); err != nil {
			return err
		}
	}
	return nil
}

// ownerLevel says how many levels up from the pod the owner of capacity
// objects is looked up; -1: no lookup (--capacity-owner-deployment, or no
// owner). Without --capacity-ownerref-level it is upstream's default 1 when
// the pod's name and namespace are known.
func (c config) ownerLevel() (int, error) {
	switch {
	case c.capacityOwner != "" && c.capacityOwnerLevelSet:
		return -1, errors.New("only one of --capacity-owner-deployment and --capacity-ownerref-level can be set")
	case c.capacityOwner != "":
		return -1, nil
	case !c.capacityOwnerLevelSet && (c.podName == "" || c.podNamespace == ""):
		return -1, nil
	case c.capacityOwnerLevel < -1:
		return -1, fmt.Errorf("--capacity-ownerref-level=%d: -1 (no owner) is the smallest level", c.capacityOwnerLevel)
	case c.capacityOwnerLevel == -1:
		return -1, nil
	case c.podName == "" || c.podNamespace == "":
		return -1, fmt.Errorf("--capacity-ownerref-level=%d needs the POD_NAME and NAMESPACE environment variables (the pod's name and namespace)", c.capacityOwnerLevel)
	case c.podNamespace != c.capacity.Namespace:
		return -1, fmt.Errorf("--capacity-ownerref-level=%d: the owner lives in namespace %q ($NAMESPACE), not in --capacity-namespace %q", c.capacityOwnerLevel, c.podNamespace, c.capacity.Namespace)
	}
	return c.capacityOwnerLevel, nil
}

// httpAddress is where the HTTP server listens; empty: no server.
func (c config) httpAddress() string {
	if c.metricsAddress != "" {
		return c.metricsAddress
	}
	return c.httpEndpoint
}
