package e2erealnode

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// csiNodeWindow, when set, makes TestRealNodeCSINodeWriters a measurement:
// csi-node-publisher runs with its default --resync-period and each step
// watches the CSINode's writes for this long, instead of until kubelet and
// the publisher have each re-checked the entry a few times
// (docs/node-publisher.md has the command and the figures).
var csiNodeWindow = flag.Duration("csinode-window", 0, "observe the CSINode writers for this long (a measurement)")

// auditPolicy logs every request on CSINodes, to count who reads and
// writes them (TestRealNodeCSINodeWriters).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: storage.k8s.io
    resources: ["csinodes"]
- level: None
`

// csiNodeWriters are the clients of the CSINode, by user agent.
var csiNodeWriters = []string{"kubelet", "csi-node-publisher"}

// TestRealNodeCSINodeWriters runs deploy/'s node DaemonSet on a real node
// with the mock driver reporting max_volumes_per_node 8 and csi-node-publisher
// told --reserved-volumes=2, and counts in the API server's audit log who
// writes the node's CSINode. Each step settles, then watches until kubelet
// and the publisher have each read the entry three times more (so each had
// three chances to write it): nobody may write it, and the count is the
// owner's.
//
//   - publisher-owns-the-count: the CSIDriver sets no
//     nodeAllocatableUpdatePeriodSeconds; kubelet writes the entry when the
//     driver registers, with 8, and never again; the publisher owns the count: 6.
//   - kubelet-refreshes-the-count: the CSIDriver sets it to 10 s, the API's
//     minimum: kubelet re-reads NodeGetInfo every 10 s and writes 8 whenever
//     the entry says otherwise (MutableCSINodeAllocatableCount). The
//     publisher steps back: it publishes the driver's 8 too, not 6.
//
// The steps run in this order on one DaemonSet; the second sets the period.
func TestRealNodeCSINodeWriters(t *testing.T) {
	ctx := context.Background()
	node := realNodes[0]
	deployed := time.Now()
	publisherArgs := []string{"--reserved-volumes=2"}
	if *csiNodeWindow == 0 {
		publisherArgs = append(publisherArgs, "--resync-period=10s")
	}
	_, csiDriver := deployNodeDriver(ctx, t, nodeDriver{
		node: node, driverArgs: []string{"--max-volumes-per-node=8"}, publisherArgs: publisherArgs,
	})
	for _, tc := range []struct {
		name string
		// refreshPeriod is set on the CSIDriver first, unless 0.
		refreshPeriod int64
		wantCount     int32
		// readers must each read the entry three times in the window:
		// kubelet reads it only while it refreshes the count.
		readers []string
	}{
		{name: "publisher-owns-the-count", wantCount: 6, readers: []string{"csi-node-publisher"}},
		{name: "kubelet-refreshes-the-count", refreshPeriod: 10, wantCount: 8, readers: csiNodeWriters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.refreshPeriod != 0 {
				setRefreshPeriod(ctx, t, csiDriver, tc.refreshPeriod)
			}
			waitSettled(ctx, t, node, tc.wantCount, deployed)
			start := time.Now()
			reads, writes := watchCSINode(ctx, t, node, start, tc.readers)
			window := time.Since(start)
			for _, ua := range csiNodeWriters {
				t.Logf("%s: %d reads, %d writes of CSINode %s in %s (%.1f writes/min)", ua, reads[ua], len(writes[ua]),
					node, window.Round(time.Second), float64(len(writes[ua]))/window.Minutes())
			}
			for ua, w := range writes {
				t.Errorf("%s wrote CSINode %s %d times after start-up:\n%s", ua, node, len(w), strings.Join(w, "\n"))
			}
			if got := entryCount(ctx, t, node); got == nil || *got != tc.wantCount {
				t.Errorf("CSINode %s: allocatable.count %v, want %d", node, got, tc.wantCount)
			}
		})
	}
}

// setRefreshPeriod sets the CSIDriver's nodeAllocatableUpdatePeriodSeconds.
func setRefreshPeriod(ctx context.Context, t *testing.T, csiDriver *unstructured.Unstructured, seconds int64) {
	t.Helper()
	cur, err := cluster.Client.StorageV1().CSIDrivers().Get(ctx, csiDriver.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.NodeAllocatableUpdatePeriodSeconds = &seconds
	if _, err := cluster.Client.StorageV1().CSIDrivers().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting nodeAllocatableUpdatePeriodSeconds: %v", err)
	}
}

// entryCount is the allocatable.count of the mock's entry in node's CSINode.
func entryCount(ctx context.Context, t *testing.T, node string) *int32 {
	t.Helper()
	csiNode, err := cluster.Client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver.DefaultName })
	if i < 0 || csiNode.Spec.Drivers[i].Allocatable == nil {
		return nil
	}
	return csiNode.Spec.Drivers[i].Allocatable.Count
}

// waitSettled waits until kubelet has written node's CSINode since the
// driver was deployed (it registered the driver) and then the entry has
// the count want.
func waitSettled(ctx context.Context, t *testing.T, node string, want int32, deployed time.Time) {
	t.Helper()
	var got string
	registered := false
	err := cluster.WaitFor(ctx, 2*podTimeout, func(ctx context.Context) (bool, error) {
		if !registered {
			_, writes, err := auditCSINode(node, deployed)
			if err != nil {
				return false, err
			}
			registered = len(writes["kubelet"]) > 0
		}
		c := entryCount(ctx, t, node)
		if c == nil {
			got = "none"
			return false, nil
		}
		got = strconv.Itoa(int(*c))
		return registered && *c == want, nil
	})
	if err != nil {
		t.Fatalf("CSINode %s never got allocatable.count %d after kubelet registered the driver (%v): %v; last count %s",
			node, want, registered, err, got)
	}
}

// watchCSINode reads the audit log from start on until each of readers
// has read node's CSINode three times, or, with -csinode-window, for that
// long; it returns the reads and the writes of node's CSINode by client.
func watchCSINode(ctx context.Context, t *testing.T, node string, start time.Time, readers []string) (map[string]int, map[string][]string) {
	t.Helper()
	if *csiNodeWindow > 0 {
		<-time.After(*csiNodeWindow) // the measurement's window, no synchronisation
		reads, writes, err := auditCSINode(node, start)
		if err != nil {
			t.Fatal(err)
		}
		return reads, writes
	}
	var reads map[string]int
	var writes map[string][]string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		if reads, writes, err = auditCSINode(node, start); err != nil {
			return false, err
		}
		for _, r := range readers {
			if reads[r] < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v did not each read CSINode %s three times: %v; reads %v", readers, node, err, reads)
	}
	return reads, writes
}

// auditCSINode returns, from the audit log, the reads of node's CSINode
// since start by client (csiNodeClient), and its writes, one line each.
func auditCSINode(node string, start time.Time) (map[string]int, map[string][]string, error) {
	reads, writes := map[string]int{}, map[string][]string{}
	err := controlplane.ReadAuditLog(cluster.AuditLog, func(e controlplane.AuditEvent) {
		if e.RequestReceived.Before(start) || e.ObjectRef == nil || e.ObjectRef.Resource != "csinodes" || e.ObjectRef.Name != node {
			return
		}
		ua := csiNodeClient(e.UserAgent)
		switch e.Verb {
		case "get":
			reads[ua]++
		case "create", "update", "patch", "delete":
			code := 0
			if e.ResponseStatus != nil {
				code = e.ResponseStatus.Code
			}
			writes[ua] = append(writes[ua], fmt.Sprintf("  %s %s by %s: %d", e.RequestReceived.Format(time.RFC3339Nano), e.Verb, e.UserAgent, code))
		}
	})
	return reads, writes, err
}

// csiNodeClient names a client of the CSINode by its user agent
// ("kubelet/v1.36.3 (linux/amd64) kubernetes/...", "csi-node-publisher/dev").
func csiNodeClient(userAgent string) string {
	name, _, _ := strings.Cut(userAgent, "/")
	if slices.Contains(csiNodeWriters, name) {
		return name
	}
	return strconv.Quote(userAgent)
}
