package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// CapacityNamespace is where the lab's csi-provisioner publishes its
// CSIStorageCapacity objects when capacity tracking is on.
const CapacityNamespace = "csi-topology"

// Burst is the capacity burst that every scheduler stack is tested with, the same for every scheduler stack: Pods
// pods with one claim of Size bytes each, all preferring zone Prefer,
// against zones with Free bytes free (split evenly over each zone's
// segments, e.g. racks).
type Burst struct {
	Pods   int
	Size   int64
	Prefer string
	Free   map[string]int64
}

// StandardBurst is the burst the e2e packages run: 20 pods x 10 Gi preferring z1,
// against zones of 60, 60 and 100 Gi free (room for exactly 6 + 6 + 10).
var StandardBurst = Burst{Pods: 20, Size: 10 << 30, Prefer: "z1", Free: map[string]int64{"z1": 60 << 30, "z2": 60 << 30, "z3": 100 << 30}}

// BurstResult is what a burst cost.
type BurstResult struct {
	// Placed maps each pod that runs to the zone of its volume.
	Placed map[string]string
	// PerZone counts the volumes made per zone.
	PerZone map[string]int
	// Misplaced lists the pods whose node is in another zone than their
	// volume.
	Misplaced []string
	// CreateCalls counts the CreateVolume calls for the burst's claims: one
	// per claim when every claim went straight to a segment with room.
	CreateCalls int
	// Exhausted counts those the driver answered RESOURCE_EXHAUSTED. (A
	// call whose requisite has another segment with room is not refused:
	// the driver makes the volume there, outside the selected node's reach,
	// and the provisioner deletes it and sends the claim back; it shows in
	// CreateCalls and Reschedules.)
	Exhausted int
	// Reschedules counts the claims sent back to the scheduler (the count of
	// the provisioner's reschedule Events).
	Reschedules int32
}

// EnableStorageCapacity creates the driver's CSIDriver object with
// storageCapacity: true, so that the stock VolumeBinding plugin checks
// CSIStorageCapacity too, and deletes it when the test ends.
func (l *Lab) EnableStorageCapacity(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := l.createCSIDriver(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Cluster.Client.StorageV1().CSIDrivers().Delete(context.WithoutCancel(ctx), DriverName, metav1.DeleteOptions{})
	})
}

// createCSIDriver creates the driver's CSIDriver object with
// storageCapacity: true and attachRequired: false, unless it exists.
func (l *Lab) createCSIDriver(ctx context.Context) error {
	_, err := l.Cluster.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec:       storagev1.CSIDriverSpec{StorageCapacity: ptr.To(true), AttachRequired: ptr.To(false)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// SetZoneFree gives every zone of free exactly that many bytes free in the
// mock driver, split evenly over the zone's segments, and waits until the
// CSIStorageCapacity objects of class say so.
func (l *Lab) SetZoneFree(ctx context.Context, class string, free map[string]int64) error {
	segs, err := l.Segments(ctx)
	if err != nil {
		return err
	}
	perZone := map[string]int64{}
	for _, s := range segs {
		perZone[s.Topology[ZoneKey]]++
	}
	for _, s := range segs {
		z := s.Topology[ZoneKey]
		if bytes, ok := free[z]; ok {
			if err := l.SetSegmentCapacity(ctx, s.Topology, s.UsedBytes+bytes/perZone[z]); err != nil {
				return err
			}
		}
	}
	var published map[string]int64
	err = l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		list, err := l.Cluster.Client.StorageV1().CSIStorageCapacities(CapacityNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		published = map[string]int64{}
		for _, c := range list.Items {
			if c.StorageClassName == class && c.Capacity != nil && c.NodeTopology != nil {
				published[c.NodeTopology.MatchLabels[ZoneKey]] += c.Capacity.Value()
			}
		}
		for z, bytes := range free {
			if published[z] != bytes {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("published capacity of class %s is %v, want %v: %w", class, published, free, err)
	}
	return nil
}

// RunBurst sets the zones' free space, creates the burst's claims and pods
// (named burst-00, burst-01, ...) in ns, waits until every pod runs or
// WorkloadTimeout passes, and reports what it cost. A pod that never runs is
// missing from Placed; the caller decides whether that is a failure.
func (l *Lab) RunBurst(t testing.TB, ctx context.Context, ns, class string, b Burst) BurstResult {
	t.Helper()
	if err := l.SetZoneFree(ctx, class, b.Free); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < b.Pods; i++ {
		l.ClaimAndPodPreferring(t, ctx, ns, class, fmt.Sprintf("burst-%02d", i), b.Size, ZoneKey, b.Prefer)
	}
	res := BurstResult{Placed: map[string]string{}, PerZone: map[string]int{}}
	_ = l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		for i := 0; i < b.Pods; i++ {
			name := fmt.Sprintf("burst-%02d", i)
			if _, ok := res.Placed[name]; ok {
				continue
			}
			if node, zone, ok := l.placed(ctx, ns, name); ok {
				res.Placed[name] = zone
				res.PerZone[zone]++
				if l.Nodes[node] != zone {
					res.Misplaced = append(res.Misplaced, name)
				}
			}
		}
		return len(res.Placed) == b.Pods, nil
	})
	claims, err := l.Cluster.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range claims.Items {
		ours["pvc-"+string(c.UID)] = true // the CSI volume name (--volume-name-prefix=pvc)
	}
	reqs, err := l.CreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if !ours[r.Name] {
			continue
		}
		res.CreateCalls++
		if r.Code == "ResourceExhausted" {
			res.Exhausted++
		}
	}
	events, err := l.Cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, "asking the scheduler to pick another node") {
			res.Reschedules += e.Count
		}
	}
	return res
}
