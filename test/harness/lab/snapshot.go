package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclientset "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Snapshot takes a real snapshot of the bound claim srcClaim (whose PV is
// src) with CreateSnapshot on the driver serving socket, as the
// external-snapshotter sidecar would, and creates the VolumeSnapshot name
// in ns and its bound VolumeSnapshotContent with the status, ready to use,
// that the snapshot controller would give them (no snapshot controller runs
// on the local control plane). The snapshot CRDs must be installed.
func (l *Lab) Snapshot(ctx context.Context, socket, ns, name, srcClaim string, src *v1.PersistentVolume) error {
	return TakeSnapshot(ctx, l.Cluster.RESTConfig, socket, DriverName, ns, name, srcClaim, src)
}

// SnapshotContentName is the name of the VolumeSnapshotContent that
// TakeSnapshot binds to the VolumeSnapshot name in ns.
func SnapshotContentName(ns, name string) string { return "content-" + ns + "-" + name }

// TakeSnapshot is Lab.Snapshot for any cluster (cfg) and any driver: the
// content names driver and has src's volume mode.
func TakeSnapshot(ctx context.Context, cfg *rest.Config, socket, driver, ns, name, srcClaim string, src *v1.PersistentVolume) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: ns + "-" + name, SourceVolumeId: src.Spec.CSI.VolumeHandle})
	if err != nil {
		return fmt.Errorf("CreateSnapshot of %s: %w", src.Spec.CSI.VolumeHandle, err)
	}
	snaps, err := snapclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	snap, err := snaps.SnapshotV1().VolumeSnapshots(ns).Create(ctx, &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &srcClaim}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	handle, size := src.Spec.CSI.VolumeHandle, resp.GetSnapshot().GetSizeBytes()
	mode := v1.PersistentVolumeFilesystem
	if src.Spec.VolumeMode != nil {
		mode = *src.Spec.VolumeMode
	}
	contentName := SnapshotContentName(ns, name)
	content, err := snaps.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapv1.VolumeSnapshotContentSpec{
			Driver: driver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete,
			Source:            snapv1.VolumeSnapshotContentSource{VolumeHandle: &handle},
			VolumeSnapshotRef: v1.ObjectReference{Namespace: ns, Name: name, UID: snap.UID},
			SourceVolumeMode:  &mode,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	snapID := resp.GetSnapshot().GetSnapshotId()
	content.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &snapID, ReadyToUse: ptr.To(true), RestoreSize: &size}
	if _, err := snaps.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, content, metav1.UpdateOptions{}); err != nil {
		return err
	}
	snap.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &contentName, ReadyToUse: ptr.To(true),
		RestoreSize: resource.NewQuantity(size, resource.BinarySI), CreationTime: &metav1.Time{Time: time.Now()}}
	_, err = snaps.SnapshotV1().VolumeSnapshots(ns).UpdateStatus(ctx, snap, metav1.UpdateOptions{})
	return err
}

// Socket is the unix socket of the node's driver (controller and node
// service).
func (n *LocalNode) Socket() string { return n.nl.nodeSocket(n.Name) }
