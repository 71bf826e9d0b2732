package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/kubeclient"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/driverconn"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/provisioner"
)

// driverWait is how long --remove-in-flight-records waits for the driver's
// socket before it works without the driver.
const driverWait = 30 * time.Second

// errRecordsKept: --remove-in-flight-records left claims with the
// finalizer.
var errRecordsKept = errors.New("claims keep the in-flight record")

// removeInFlightRecords is the one-shot --remove-in-flight-records: it
// removes the in-flight finalizer from the driver's claims before a
// rollback to upstream external-provisioner (provisioner.RemoveInFlightRecords),
// prints a summary on out and returns errRecordsKept when claims keep it.
func removeInFlightRecords(ctx context.Context, cfg config, out io.Writer) error {
	logger := klog.FromContext(ctx)
	restCfg, err := kubeclient.RESTConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	clients, err := newClients(cfg, restCfg)
	if err != nil {
		return err
	}
	cc := cfg.controller
	cc.Provisioner.DriverName = cfg.recordsDriver
	cc.Provisioner.IgnoreAttributesClasses = !cfg.featureGates.enabled("VolumeAttributesClass")
	if cfg.nodeDeployment {
		cc.Provisioner.Node = &cfg.node
	}
	connectCtx, cancel := context.WithTimeout(ctx, driverWait)
	conn, info, err := driverconn.Connect(connectCtx, cfg.csiAddress, newMetricsManager(), cfg.probeTimeout)
	cancel()
	if conn != nil {
		defer conn.Close()
	}
	var driver provisioner.ControllerClient
	switch {
	case err != nil && cfg.recordsDriver == "":
		return fmt.Errorf("the CSI driver at %s did not answer within %s, and --remove-in-flight-records-driver does not name it: %w", cfg.csiAddress, driverWait, err)
	case err != nil:
		logger.Error(err, "Working without the CSI driver: claims being deleted without a PV keep the in-flight record", "address", cfg.csiAddress)
	case cfg.recordsDriver != "" && cfg.recordsDriver != info.Name:
		return fmt.Errorf("--remove-in-flight-records-driver=%s, but the CSI driver at %s is %s", cfg.recordsDriver, cfg.csiAddress, info.Name)
	default:
		cc.Provisioner.DriverName = info.Name
		cc.Provisioner.SupportsTopology = info.SupportsTopology
		cc.Provisioner.SupportsSingleNodeMultiWriter = info.SupportsSingleNodeMultiWriter
		cc.Provisioner.SupportsModify = info.SupportsModify
		driver = csi.NewControllerClient(conn)
	}
	res, err := provisioner.RemoveInFlightRecords(ctx, cc, clients, driver)
	if err != nil {
		return err
	}
	printRemoval(out, cc.Provisioner.DriverName, res)
	if len(res.Kept) > 0 {
		return fmt.Errorf("%w: %d: %s", errRecordsKept, len(res.Kept), strings.Join(res.Kept, ", "))
	}
	return nil
}

// printRemoval prints what RemoveInFlightRecords did, one line.
func printRemoval(out io.Writer, driver string, res inflight.Removal) {
	outcomes := make([]string, 0, len(res.Outcomes))
	for o, n := range res.Outcomes {
		outcomes = append(outcomes, fmt.Sprintf("%s=%d", o, n))
	}
	sort.Strings(outcomes)
	fmt.Fprintf(out, "in-flight records of driver %s: %d claims carried %s; %s; kept: %d\n",
		driver, res.Claims, inflight.Finalizer, strings.Join(outcomes, " "), len(res.Kept))
	for _, c := range res.Kept {
		fmt.Fprintf(out, "kept: %s\n", c)
	}
}
