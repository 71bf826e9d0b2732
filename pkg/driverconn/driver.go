package driverconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// DriverInfo is what the provisioner learns from the driver at start-up.
type DriverInfo struct {
	// Name is the driver name from GetPluginInfo.
	Name string
	// SupportsTopology: the VOLUME_ACCESSIBILITY_CONSTRAINTS plugin capability.
	SupportsTopology bool
	// SupportsSingleNodeMultiWriter: the SINGLE_NODE_MULTI_WRITER controller capability.
	SupportsSingleNodeMultiWriter bool
	// SupportsCapacity: the GET_CAPACITY controller capability.
	SupportsCapacity bool
	// SupportsClone: the CLONE_VOLUME controller capability.
	SupportsClone bool
	// SupportsSnapshot: the CREATE_DELETE_SNAPSHOT controller capability.
	SupportsSnapshot bool
	// SupportsModify: the MODIFY_VOLUME controller capability.
	SupportsModify bool
	// SupportsAttach: the PUBLISH_UNPUBLISH_VOLUME controller capability.
	SupportsAttach bool
}

// errDriverUnusable marks a driver the provisioner cannot work with: no
// controller service, or no CREATE_DELETE_VOLUME capability.
var errDriverUnusable = errors.New("CSI driver cannot provision volumes")

// Connect waits until the driver's socket accepts connections, saying
// while it waits why it cannot connect yet (address is checked with
// SocketPath), connects, waits until its Probe reports ready, and reads its
// name and capabilities. It fails when the driver has no controller service
// or lacks CREATE_DELETE_VOLUME, because the provisioner could not do
// anything with it. The connection is returned even when reading the driver fails after
// connecting, so the caller can close it. opts are passed to
// connection.Connect.
func Connect(ctx context.Context, address string, mm metrics.CSIMetricsManager, probeTimeout time.Duration, opts ...connection.Option) (*grpc.ClientConn, DriverInfo, error) {
	logger := klog.FromContext(ctx)
	path, err := WaitForSocket(ctx, address)
	if err != nil {
		return nil, DriverInfo{}, err
	}
	conn, err := connection.Connect(ctx, unixScheme+path, mm, opts...)
	if err != nil {
		return nil, DriverInfo{}, fmt.Errorf("connecting to CSI driver at %q: %w", address, err)
	}
	if err := rpc.ProbeForever(ctx, conn, probeTimeout); err != nil {
		return conn, DriverInfo{}, fmt.Errorf("waiting for the CSI driver to become ready: %w", err)
	}
	info, err := queryDriver(ctx, conn)
	if err != nil {
		return conn, DriverInfo{}, err
	}
	if mm != nil {
		mm.SetDriverName(info.Name)
	}
	logger.Info("Connected to CSI driver", "driver", info.Name, "topology", info.SupportsTopology,
		"capacity", info.SupportsCapacity, "clone", info.SupportsClone, "snapshot", info.SupportsSnapshot, "modify", info.SupportsModify, "attach", info.SupportsAttach)
	return conn, info, nil
}

// queryDriver reads the driver's name and capabilities. Errors wrap
// errDriverUnusable when the driver answered but cannot provision.
func queryDriver(ctx context.Context, conn *grpc.ClientConn) (DriverInfo, error) {
	name, err := rpc.GetDriverName(ctx, conn)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("reading the CSI driver name: %w", err)
	}
	pluginCaps, err := rpc.GetPluginCapabilities(ctx, conn)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("reading plugin capabilities of %q: %w", name, err)
	}
	if !pluginCaps[csi.PluginCapability_Service_CONTROLLER_SERVICE] {
		return DriverInfo{}, fmt.Errorf("%w: CSI driver %q has no controller service", errDriverUnusable, name)
	}
	ctrlCaps, err := rpc.GetControllerCapabilities(ctx, conn)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("reading controller capabilities of %q: %w", name, err)
	}
	if !ctrlCaps[csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME] {
		return DriverInfo{}, fmt.Errorf("%w: CSI driver %q lacks the CREATE_DELETE_VOLUME capability", errDriverUnusable, name)
	}
	return DriverInfo{
		Name:                          name,
		SupportsTopology:              pluginCaps[csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS],
		SupportsSingleNodeMultiWriter: ctrlCaps[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER],
		SupportsCapacity:              ctrlCaps[csi.ControllerServiceCapability_RPC_GET_CAPACITY],
		SupportsClone:                 ctrlCaps[csi.ControllerServiceCapability_RPC_CLONE_VOLUME],
		SupportsSnapshot:              ctrlCaps[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT],
		SupportsModify:                ctrlCaps[csi.ControllerServiceCapability_RPC_MODIFY_VOLUME],
		SupportsAttach:                ctrlCaps[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME],
	}, nil
}
