package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
)

// HeartbeatNode is a lab node whose mock node service the test can kill -9
// and start again, with a csi-node-publisher that renews the driver's
// heartbeat Lease on a short TTL.
type HeartbeatNode struct {
	l      *Lab
	Name   string
	TTL    time.Duration
	driver *controlplane.Process
	starts int
	// driverArgs, when set, are the driver's flags instead of those of the
	// mock driver's node service in the node's zone (a NodeLocalLab's
	// node-local driver); ready, when set, waits until a started driver
	// serves.
	driverArgs []string
	ready      func() error
}

// AddHeartbeatNode creates a node in zone with the mock driver's node
// service and csi-node-publisher renewing the driver's heartbeat Lease
// every second with the TTL ttl, and waits for the node's CSINode entry.
// The test's cleanup stops both and deletes the node.
func (l *Lab) AddHeartbeatNode(t testing.TB, ctx context.Context, name, zone string, ttl time.Duration) *HeartbeatNode {
	t.Helper()
	if err := l.AddNode(ctx, NodeSpec{Name: name, Zone: zone}); err != nil {
		t.Fatal(err)
	}
	h := &HeartbeatNode{l: l, Name: name, TTL: ttl}
	t.Cleanup(func() {
		l.StopPublisher(name)
		if h.driver != nil {
			h.driver.Stop(15 * time.Second)
		}
		_ = l.Cluster.Client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	h.StartDriver(t)
	if err := l.StartPublisher(ctx, name, "--lease-duration="+ttl.String(), "--lease-renew-interval=1s"); err != nil {
		t.Fatal(err)
	}
	return h
}

// StartDriver starts the node's mock node service (again).
func (h *HeartbeatNode) StartDriver(t testing.TB) {
	t.Helper()
	if err := h.startDriver(); err != nil {
		t.Fatal(err)
	}
}

func (h *HeartbeatNode) startDriver() error {
	h.starts++
	args := h.driverArgs
	if args == nil {
		args = []string{"--mode=node", "--node-id=" + h.Name, "--node-topology=zone=" + h.l.Nodes[h.Name], "--endpoint=unix://" + h.l.nodeSocket(h.Name), "-v=2"}
	}
	p, err := h.l.Cluster.StartProcess(fmt.Sprintf("mock-driver-%s-%d", h.Name, h.starts), filepath.Join(h.l.BinDir, "mock-driver"), args, nil)
	if err != nil {
		return err
	}
	h.driver = p
	if h.ready != nil {
		return h.ready()
	}
	return nil
}

// KillDriver kills the node's mock node service with SIGKILL.
func (h *HeartbeatNode) KillDriver() { h.driver.Kill() }

// Driver returns the node's driver process (the last one started).
func (h *HeartbeatNode) Driver() *controlplane.Process { return h.driver }

// WaitLease waits until the node's heartbeat Lease is live (or expired),
// as the API holds it.
func (h *HeartbeatNode) WaitLease(t testing.TB, ctx context.Context, live bool) {
	t.Helper()
	if err := h.l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		l, err := h.l.Cluster.Client.CoordinationV1().Leases(PublisherNamespace).Get(ctx, heartbeat.LeaseName(DriverName, h.Name), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		lv, _, known := heartbeat.LeaseLive(l, time.Now())
		return known && lv == live, nil
	}); err != nil {
		t.Fatalf("heartbeat Lease of %s never live=%v: %v", h.Name, live, err)
	}
}

// DriverSilenceOutcome is what DriverSilence saw.
type DriverSilenceOutcome struct {
	// Reason is the message of the pinned pod's PodScheduled condition
	// while the driver was silent.
	Reason string
}

// DriverSilence runs the live-driver scenario of issue 14 against the
// cluster's scheduler, on a node h of its own: a pod pinned to the node is
// placed there while the driver is live; after kill -9 of the driver and
// the heartbeat TTL, pods with WaitForFirstConsumer claims of class that
// prefer the node are placed elsewhere, a pod pinned to it stays Pending
// with the reason in its condition and a FailedScheduling event, and once
// the driver is back a new pinned pod is placed there. With requeued, the
// pending pinned pod must also be placed there then (the plugin activates
// it when the Lease is renewed; a stock scheduler retries an extender's
// rejection only on another cluster event or its periodic flush).
func (l *Lab) DriverSilence(t *testing.T, ctx context.Context, ns, class string, h *HeartbeatNode, requeued bool) DriverSilenceOutcome {
	t.Helper()
	return l.DriverSilenceWith(t, ctx, ns, class, h, requeued, nil)
}

// DriverSilenceWith is DriverSilence that runs whileSilent (when not nil)
// while the driver is dead and its Lease expired, after the pods created
// then were checked and before the driver starts again.
func (l *Lab) DriverSilenceWith(t *testing.T, ctx context.Context, ns, class string, h *HeartbeatNode, requeued bool, whileSilent func()) DriverSilenceOutcome {
	t.Helper()
	var out DriverSilenceOutcome
	want := fmt.Sprintf("CSI driver %s on node %s has not renewed its heartbeat for ", DriverName, h.Name)
	pinned := func(name string) {
		t.Helper()
		l.createClaim(t, ctx, ns, class, name)
		l.createPinnedPod(t, ctx, ns, name, h.Name)
	}
	h.WaitLease(t, ctx, true)
	pinned("while-live")
	if node, _ := l.WaitPlaced(t, ctx, ns, "while-live"); node != h.Name {
		t.Fatalf("while-live on %s, want %s", node, h.Name)
	}

	h.KillDriver()
	h.WaitLease(t, ctx, false)
	pinned("pinned")
	for i := 0; i < 3; i++ {
		l.ClaimAndPod(t, ctx, ns, class, fmt.Sprintf("prefers-%d", i), 1<<30, h.Name)
	}
	for i := 0; i < 3; i++ {
		if node, _ := l.WaitPlaced(t, ctx, ns, fmt.Sprintf("prefers-%d", i)); node == h.Name {
			t.Errorf("prefers-%d placed on %s, whose driver is silent", i, node)
		}
	}
	out.Reason = l.waitRejectedWithReason(t, ctx, ns, "pinned", want)

	if whileSilent != nil {
		whileSilent()
	}
	h.StartDriver(t)
	h.WaitLease(t, ctx, true)
	if requeued {
		// Before any other pod is created: no event of the test's own
		// requeues it.
		if node, _ := l.WaitPlaced(t, ctx, ns, "pinned"); node != h.Name {
			t.Errorf("pinned on %s, want %s once the driver is back", node, h.Name)
		}
	}
	pinned("after")
	if node, _ := l.WaitPlaced(t, ctx, ns, "after"); node != h.Name {
		t.Errorf("after on %s, want %s once the driver is back", node, h.Name)
	}
	return out
}

// waitRejectedWithReason waits until pod name is unscheduled with want in
// its PodScheduled condition (whose message it returns) and in a
// FailedScheduling Event, and checks that its claim (of the same name) was
// not selected for a node.
func (l *Lab) waitRejectedWithReason(t *testing.T, ctx context.Context, ns, name, want string) string {
	t.Helper()
	var reason string
	c := l.Cluster.Client
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("%s placed on %s, whose driver is silent", name, pod.Spec.NodeName)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse && strings.Contains(cond.Message, want) {
				reason = cond.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s pod: no PodScheduled condition with %q: %v", name, want, err)
	}
	if err := l.Cluster.WaitFor(ctx, WorkloadTimeout, func(ctx context.Context) (bool, error) {
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedScheduling"})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("%s pod: no FailedScheduling event with %q: %v", name, want, err)
	}
	if pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if node := pvc.Annotations[annSelectedNode]; node != "" {
		t.Errorf("claim %s selected for %s while the driver is silent", name, node)
	}
	return reason
}
