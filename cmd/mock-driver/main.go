// Command mock-driver is a real CSI driver for tests, csi-sanity and local
// clusters: topology, per-segment capacity, volume limits, fault injection,
// persistent state and an admin endpoint. See mock-driver/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

// options are the parsed command line.
type options struct {
	cfg          driver.Config
	mode         string
	nodeTopology string
	topologyFile string
	knownNodes   string
	segmentsFile string
	faultsFile   string
	mutable      string
	capacity     int64
	showVersion  bool
}

// parseFlags parses the command line into a driver configuration, reading
// the segment table and fault files (JSON or YAML).
func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mock-driver", flag.ContinueOnError)
	fs.SetOutput(output)
	klog.InitFlags(fs)
	fs.StringVar(&o.cfg.Name, "name", driver.DefaultName, "Driver name.")
	fs.StringVar(&o.cfg.Endpoint, "endpoint", "unix:///run/csi/socket", "gRPC endpoint: unix:///path/csi.sock or a path.")
	fs.StringVar(&o.mode, "mode", string(driver.ModeBoth), "Services to serve: controller, node or both.")
	fs.StringVar(&o.cfg.NodeID, "node-id", "", "Node ID (modes node and both).")
	fs.StringVar(&o.nodeTopology, "node-topology", "", `The node's segment, e.g. "zone=z1,rack=r1"; keys without '/' get the prefix `+driver.TopologyPrefix+`.`)
	fs.Int64Var(&o.cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "NodeGetInfo max_volumes_per_node, also enforced per node by ControllerPublishVolume (0: no limit).")
	fs.BoolVar(&o.cfg.DisableTopology, "disable-topology", false, "Do not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS.")
	fs.BoolVar(&o.cfg.DisableSnapshots, "disable-snapshots", false, "Do not advertise CREATE_DELETE_SNAPSHOT and LIST_SNAPSHOTS (the snapshot calls are UNIMPLEMENTED).")
	fs.BoolVar(&o.cfg.RegionalSnapshots, "regional-snapshots", false, "Restore a snapshot in any segment the accessibility requirements allow, like the clouds' regional snapshots; by default a restore is made in the snapshot's source segment only, like node-local storage.")
	fs.BoolVar(&o.cfg.DisableCloning, "disable-cloning", false, "Do not advertise CLONE_VOLUME (CreateVolume refuses a volume source).")
	fs.BoolVar(&o.cfg.DisableModify, "disable-modify", false, "Do not advertise MODIFY_VOLUME (ControllerModifyVolume is UNIMPLEMENTED, CreateVolume refuses mutable parameters).")
	fs.StringVar(&o.mutable, "mutable-parameters", strings.Join(driver.DefaultMutableParameters, ","), "Comma-separated mutable parameter keys that CreateVolume and ControllerModifyVolume accept; other keys are INVALID_ARGUMENT.")
	fs.StringVar(&o.topologyFile, "node-topology-file", "", "Segments of many nodes, JSON or YAML: node ID -> {key: value}; a node instance takes its --node-id's entry (for a DaemonSet; excludes --node-topology).")
	fs.StringVar(&o.segmentsFile, "segments-file", "", "Segment table of the controller, JSON or YAML (see README).")
	fs.Int64Var(&o.capacity, "capacity-bytes", -1, "Capacity of the one segment of a controller without --segments-file, its --node-topology; e.g. a node-local driver (--mode=both --node-topology=kubernetes.io/hostname=<node>) with its node's capacity (-1: unlimited).")
	fs.StringVar(&o.knownNodes, "known-nodes", "", "Comma-separated node IDs ControllerPublishVolume accepts (empty: any node for a controller).")
	fs.Int64Var(&o.cfg.MaxVolumeBytes, "max-volume-bytes", driver.DefaultMaxVolumeBytes, "Largest volume; larger requests fail with OUT_OF_RANGE.")
	fs.StringVar(&o.cfg.StateFile, "state-file", "", "File that persists the controller's volumes and snapshots; every change is on disk (fsync, rename) before the call that made it answers (empty: memory only).")
	fs.StringVar(&o.cfg.DataDir, "data-dir", "", "Directory holding one sub-directory per volume that NodePublishVolume bind-mounts onto the target (empty: publish creates a plain directory, for tests without mount privileges).")
	fs.StringVar(&o.cfg.AdminAddress, "admin-address", "", "Loopback address of the admin HTTP endpoint, e.g. 127.0.0.1:9808 (empty: none).")
	fs.StringVar(&o.cfg.HealthAddress, "health-address", "", `Address (host:port, any interface), e.g. ":9808", of a plain-HTTP endpoint serving only /healthz for liveness probes: 200 while the gRPC server serves and Probe succeeds, else 503 (empty: none).`)
	fs.StringVar(&o.faultsFile, "faults-file", "", "Initial fault rules: a JSON or YAML list (see README).")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.cfg.Mode = driver.Mode(o.mode)
	o.cfg.Version = version
	err := o.resolve()
	return o, err
}

// resolve turns the flags that need reading or parsing (topology, the
// segment table, capacity, mutable parameters, known nodes, faults) into
// the driver's configuration, and refuses combinations that exclude each
// other.
func (o *options) resolve() error {
	var err error
	if o.topologyFile != "" {
		if o.nodeTopology != "" {
			return errors.New("--node-topology and --node-topology-file exclude each other")
		}
		if o.nodeTopology, err = nodeTopologyFromFile(o.topologyFile, o.cfg.NodeID); err != nil {
			return fmt.Errorf("--node-topology-file: %w", err)
		}
	}
	if o.cfg.NodeTopology, err = driver.ParseSegment(o.nodeTopology); err != nil {
		return fmt.Errorf("--node-topology: %w", err)
	}
	o.cfg.MutableParameters = []string{}
	if o.mutable != "" {
		o.cfg.MutableParameters = strings.Split(o.mutable, ",")
		if slices.Contains(o.cfg.MutableParameters, "") {
			return fmt.Errorf("--mutable-parameters %q: a key is empty", o.mutable)
		}
	}
	if o.knownNodes != "" {
		o.cfg.KnownNodes = strings.Split(o.knownNodes, ",")
	}
	if o.segmentsFile != "" {
		data, err := readJSONOrYAML(o.segmentsFile)
		if err != nil {
			return fmt.Errorf("--segments-file: %w", err)
		}
		table, err := driver.ParseSegmentTable(data)
		if err != nil {
			return fmt.Errorf("--segments-file %s: %w", o.segmentsFile, err)
		}
		o.cfg.Segments, o.cfg.NodeLimits = table.Segments, table.NodeLimits
	}
	if o.capacity != -1 {
		switch {
		case o.capacity < 0:
			return fmt.Errorf("--capacity-bytes %d: want bytes, or -1 for unlimited", o.capacity)
		case o.segmentsFile != "":
			return errors.New("--capacity-bytes and --segments-file exclude each other (give the capacity in the segment table)")
		case o.cfg.Mode == driver.ModeNode:
			return errors.New("--capacity-bytes needs a controller (--mode=controller or both)")
		}
		o.cfg.Segments = []driver.SegmentConfig{{Topology: o.cfg.NodeTopology, CapacityBytes: o.capacity}}
	}
	if o.faultsFile != "" {
		data, err := readJSONOrYAML(o.faultsFile)
		if err != nil {
			return fmt.Errorf("--faults-file: %w", err)
		}
		if o.cfg.Faults, err = faults.ParseRules(data); err != nil {
			return fmt.Errorf("--faults-file %s: %w", o.faultsFile, err)
		}
	}
	return nil
}

// nodeTopologyFromFile returns node's entry of a node topology file in the
// form of --node-topology.
func nodeTopologyFromFile(path, node string) (string, error) {
	data, err := readJSONOrYAML(path)
	if err != nil {
		return "", err
	}
	var table map[string]map[string]string
	if err := json.Unmarshal(data, &table); err != nil {
		return "", fmt.Errorf("%s: want node ID -> {key: value}: %w", path, err)
	}
	seg, ok := table[node]
	if !ok || node == "" {
		return "", fmt.Errorf("%s has no entry for node %q", path, node)
	}
	parts := make([]string, 0, len(seg))
	for k, v := range seg {
		if k == "" || v == "" || strings.ContainsAny(k+v, ",=") {
			return "", fmt.Errorf("%s: node %q: topology key %q and value %q must be non-empty and contain neither ',' nor '='", path, node, k, v)
		}
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), nil
}

// readJSONOrYAML reads a file of JSON or YAML and returns it as JSON.
func readJSONOrYAML(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return out, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("mock-driver", version)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	d, err := driver.New(o.cfg)
	if err != nil {
		logger.Error(err, "Cannot start the mock driver")
		klog.FlushAndExit(klog.ExitFlushTimeout, 2)
	}
	if err := d.Run(ctx); err != nil {
		logger.Error(err, "Mock driver failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
