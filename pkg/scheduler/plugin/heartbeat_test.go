package plugin

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/heartbeat"
)

// handle is the part of the framework handle New uses, over a fake
// clientset, recording the pods the plugin activates.
type handle struct {
	fwk.Handle
	client  kubernetes.Interface
	factory informers.SharedInformerFactory

	mu        sync.Mutex
	activated []string
}

func (h *handle) ClientSet() kubernetes.Interface                        { return h.client }
func (h *handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h *handle) KubeConfig() *rest.Config                               { return nil }

func (h *handle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range pods {
		h.activated = append(h.activated, p.Namespace+"/"+p.Name)
	}
}

func (h *handle) activatedPods() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.activated...)
}

func heartbeatLease(node string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: heartbeat.LeaseName(driver, node), Labels: map[string]string{heartbeat.LeaseDriverLabel: driver}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](4),
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// A pod rejected on a node whose driver went silent is activated as soon as
// the node's heartbeat Lease is renewed; one bound elsewhere meanwhile is
// forgotten; with driverHeartbeat false the node is not checked at all.
func TestDriverHeartbeat(t *testing.T) {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	cls := "fast"
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "d",
		VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	objects := func() []any {
		return []any{
			&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "u1"},
				Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, Resources: v1.VolumeResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}},
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cls}, Provisioner: driver, VolumeBindingMode: &mode},
			&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{
				Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: "n1"}}}},
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
			pod.DeepCopy(),
			heartbeatLease("n1", time.Now().Add(-time.Minute)),
		}
	}
	start := func(t *testing.T, args string) (*Plugin, *handle, context.Context) {
		t.Helper()
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		client := fake.NewClientset()
		for _, o := range objects() {
			var err error
			switch o := o.(type) {
			case *v1.PersistentVolumeClaim:
				_, err = client.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *storagev1.StorageClass:
				_, err = client.StorageV1().StorageClasses().Create(ctx, o, metav1.CreateOptions{})
			case *storagev1.CSINode:
				_, err = client.StorageV1().CSINodes().Create(ctx, o, metav1.CreateOptions{})
			case *v1.Node:
				_, err = client.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
			case *v1.Pod:
				_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *coordinationv1.Lease:
				_, err = client.CoordinationV1().Leases(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		h := &handle{client: client, factory: informers.NewSharedInformerFactory(client, 0)}
		pl, err := New(ctx, raw(args), h)
		if err != nil {
			t.Fatal(err)
		}
		h.factory.Start(ctx.Done())
		h.factory.WaitForCacheSync(ctx.Done())
		t.Cleanup(func() { cancel(); h.factory.Shutdown() })
		return pl.(*Plugin), h, ctx
	}
	filter := func(t *testing.T, p *Plugin, ctx context.Context) *fwk.Status {
		t.Helper()
		cs := &cycleState{data: map[fwk.StateKey]fwk.StateData{}}
		if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter %v", st)
		}
		return p.Filter(ctx, cs, pod, nodeInfo{node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}})
	}
	poll := func(t *testing.T, ctx context.Context, what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// The plugin's Lease informer is its own, started in the background
	// (an optional API), so Filter counts every node as live until it has
	// synced: filterOnceSynced waits for that first.
	filterOnceSynced := func(t *testing.T, p *Plugin, ctx context.Context) *fwk.Status {
		t.Helper()
		poll(t, ctx, "heartbeat Leases synced", p.leasesSynced)
		return filter(t, p, ctx)
	}

	t.Run("activated when the Lease is renewed", func(t *testing.T) {
		p, h, ctx := start(t, `{"driverName":"`+driver+`"}`)
		st := filterOnceSynced(t, p, ctx)
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(),
			"CSIDriverNotLive: CSI driver "+driver+" on node n1 has not renewed its heartbeat for 1m") {
			t.Fatalf("Filter = %v, want the driver's silence, unresolvable", st)
		}
		if n := p.waiting.len(); n != 1 {
			t.Fatalf("%d pods waiting, want 1", n)
		}
		if got := h.activatedPods(); len(got) != 0 {
			t.Fatalf("activated %v before the Lease was renewed", got)
		}
		if _, err := h.client.CoordinationV1().Leases("csi").Update(ctx, heartbeatLease("n1", time.Now()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, ctx, "pod activated", func() bool { return len(h.activatedPods()) == 1 })
		if got := h.activatedPods(); got[0] != "ns/p" || p.waiting.len() != 0 {
			t.Errorf("activated %v, %d still waiting; want ns/p, none", got, p.waiting.len())
		}
		if st := filter(t, p, ctx); !st.IsSuccess() {
			t.Errorf("Filter after the renewal = %v, want success", st)
		}
	})

	t.Run("forgotten once bound", func(t *testing.T) {
		p, h, ctx := start(t, `{"driverName":"`+driver+`"}`)
		filterOnceSynced(t, p, ctx)
		if n := p.waiting.len(); n != 1 {
			t.Fatalf("%d pods waiting, want 1", n)
		}
		bound := pod.DeepCopy()
		bound.Spec.NodeName = "n2"
		if _, err := h.client.CoreV1().Pods("ns").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, ctx, "pod forgotten", func() bool { return p.waiting.len() == 0 })
	})

	t.Run("off", func(t *testing.T) {
		p, _, ctx := start(t, `{"driverName":"`+driver+`","driverHeartbeat":false}`)
		if st := filter(t, p, ctx); !st.IsSuccess() || p.waiting != nil {
			t.Errorf("Filter = %v (waiting %v), want success and no tracking", st, p.waiting)
		}
	})

	t.Run("Leases of another namespace not seen", func(t *testing.T) {
		p, _, ctx := start(t, `{"driverName":"`+driver+`","heartbeatNamespace":"elsewhere"}`)
		if st := filterOnceSynced(t, p, ctx); !st.IsSuccess() {
			t.Errorf("Filter = %v, want success", st)
		}
	})
}
