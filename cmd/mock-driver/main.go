// Command mock-driver is a real CSI driver for tests, csi-sanity and local
// clusters: topology, per-segment capacity, volume limits, fault injection.
// See mock-driver/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/faults"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "devel"

type options struct {
	cfg          driver.Config
	mode         string
	nodeTopology string
	segmentsFile string
	faultsFile   string
	showVersion  bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("mock-driver", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.cfg.Name, "name", driver.DefaultName, "Driver name.")
	fs.StringVar(&o.cfg.Endpoint, "endpoint", "unix:///run/csi/socket", "gRPC endpoint (unix socket).")
	fs.StringVar(&o.mode, "mode", string(driver.ModeBoth), "Services to serve: controller, node or both.")
	fs.StringVar(&o.cfg.NodeID, "node-id", "", "Node ID (node and both modes).")
	fs.StringVar(&o.nodeTopology, "node-topology", "", `The node's segment, e.g. "zone=z1,rack=r1" (keys without '/' get the prefix `+driver.TopologyPrefix+`).`)
	fs.Int64Var(&o.cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "Volumes per node, reported by NodeGetInfo and enforced by ControllerPublishVolume (0: no limit).")
	fs.BoolVar(&o.cfg.DisableTopology, "disable-topology", false, "Do not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS.")
	fs.StringVar(&o.segmentsFile, "segments-file", "", "JSON segment table of the controller (see README).")
	fs.Int64Var(&o.cfg.MaxVolumeBytes, "max-volume-bytes", driver.DefaultMaxVolumeBytes, "Largest volume; larger requests fail with OUT_OF_RANGE.")
	fs.StringVar(&o.cfg.StateFile, "state-file", "", "File that persists the volumes (empty: memory only).")
	fs.StringVar(&o.cfg.AdminAddress, "admin-address", "", "TCP address of the admin HTTP endpoint, e.g. 127.0.0.1:9808 (empty: off).")
	fs.StringVar(&o.faultsFile, "faults-file", "", "JSON list of initial fault rules.")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	o.cfg.Mode = driver.Mode(o.mode)
	o.cfg.Version = version
	var err error
	if o.cfg.NodeTopology, err = driver.ParseSegment(o.nodeTopology); err != nil {
		return o, err
	}
	if o.segmentsFile != "" {
		if o.cfg.Segments, o.cfg.NodeLimits, err = driver.LoadSegmentsFile(o.segmentsFile); err != nil {
			return o, err
		}
	}
	if o.faultsFile != "" {
		data, err := os.ReadFile(o.faultsFile)
		if err != nil {
			return o, fmt.Errorf("reading faults file: %w", err)
		}
		var rules []faults.Rule
		if err := json.Unmarshal(data, &rules); err != nil {
			return o, fmt.Errorf("parsing faults file %q: %w", o.faultsFile, err)
		}
		o.cfg.Faults = rules
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("mock-driver", version)
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.FromContext(ctx)
	d, err := driver.New(o.cfg)
	if err == nil {
		err = d.Run(ctx)
	}
	if err != nil {
		logger.Error(err, "mock-driver failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
