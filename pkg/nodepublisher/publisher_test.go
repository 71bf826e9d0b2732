package nodepublisher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/testdriver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
)

const (
	testDriver = driver.DefaultName
	zoneKey    = driver.TopologyPrefix + "zone"
	rackKey    = driver.TopologyPrefix + "rack"
)

type driverClient struct {
	csi.IdentityClient
	csi.NodeClient
}

// startNodeDriver serves a mock driver's node service in-process.
func startNodeDriver(t *testing.T, ctx context.Context, maxVolumes int64) DriverClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "pub")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	testdriver.Start(t, ctx, driver.Config{Endpoint: "unix://" + sock, Mode: driver.ModeNode, NodeID: "node-id-1",
		NodeTopology: map[string]string{"zone": "z1", "rack": "r2"}, MaxVolumesPerNode: maxVolumes})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return driverClient{csi.NewIdentityClient(conn), csi.NewNodeClient(conn)}
}

func node(labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: labels}}
}

func csiNodeWith(drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
	return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
}

func TestPublishOnce(t *testing.T) {
	other := storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "x", TopologyKeys: []string{"foo"}}
	ours := storagev1.CSINodeDriver{Name: testDriver, NodeID: "node-id-1", TopologyKeys: []string{rackKey, zoneKey},
		Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](3)}}
	tests := []struct {
		name       string
		maxVolumes int64
		reserved   int64
		objs       []runtime.Object
		want       []storagev1.CSINodeDriver
		wantErr    error
		wantWrites int // CSINode create/update calls
	}{
		{name: "creates the CSINode", maxVolumes: 4, reserved: 1, objs: []runtime.Object{node(nil)}, want: []storagev1.CSINodeDriver{ours}, wantWrites: 1},
		{
			name: "keeps other drivers' entries", maxVolumes: 4, reserved: 1,
			objs: []runtime.Object{node(nil), csiNodeWith(other)}, want: []storagev1.CSINodeDriver{other, ours}, wantWrites: 1,
		},
		{
			name: "nothing written when kubelet already published the same", maxVolumes: 4, reserved: 1,
			objs: []runtime.Object{node(map[string]string{zoneKey: "z1", rackKey: "r2"}), csiNodeWith(ours)}, want: []storagev1.CSINodeDriver{ours},
		},
		{
			name: "count changes", maxVolumes: 4, reserved: 0, objs: []runtime.Object{node(nil), csiNodeWith(ours)},
			want: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "node-id-1", TopologyKeys: []string{rackKey, zoneKey},
				Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](4)}}},
			wantWrites: 1,
		},
		{
			name: "no limit", maxVolumes: 0, objs: []runtime.Object{node(nil)}, wantWrites: 1,
			want: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "node-id-1", TopologyKeys: []string{rackKey, zoneKey}}},
		},
		{
			name: "limit removed when the driver stops reporting one", maxVolumes: 0, objs: []runtime.Object{node(nil), csiNodeWith(ours)}, wantWrites: 1,
			want: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "node-id-1", TopologyKeys: []string{rackKey, zoneKey}}},
		},
		{name: "reserved above the limit", maxVolumes: 2, reserved: 3, objs: []runtime.Object{node(nil)}, wantErr: ErrNegativeCount},
		{name: "label collision", maxVolumes: 2, objs: []runtime.Object{node(map[string]string{zoneKey: "elsewhere"})}, wantErr: ErrLabelCollision},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(tc.objs...)
			p, err := NewPublisher(PublisherConfig{NodeName: "n1", ReservedVolumes: tc.reserved}, client,
				startNodeDriver(t, ctx, tc.maxVolumes), nil)
			if err != nil {
				t.Fatal(err)
			}
			err = p.PublishOnce(ctx)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("PublishOnce = %v, want %v", err, tc.wantErr)
			}
			writes := 0
			for _, a := range client.Actions() {
				if a.GetResource().Resource == "csinodes" && (a.GetVerb() == "create" || a.GetVerb() == "patch") {
					writes++
				}
			}
			if writes != tc.wantWrites {
				t.Errorf("%d CSINode writes, want %d", writes, tc.wantWrites)
			}
			if tc.wantErr != nil {
				if errors.Is(err, ErrLabelCollision) {
					evs, _ := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
					if len(evs.Items) != 1 || evs.Items[0].Reason != "TopologyLabelCollision" || evs.Items[0].InvolvedObject.Name != "n1" ||
						!strings.Contains(evs.Items[0].Message, "not overwriting") {
						t.Errorf("collision events = %+v, want one on n1", evs.Items)
					}
					n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
					if n.Labels[zoneKey] != "elsewhere" {
						t.Errorf("colliding label overwritten: %v", n.Labels)
					}
				}
				return
			}
			cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			byName := cmpopts.SortSlices(func(a, b storagev1.CSINodeDriver) bool { return a.Name < b.Name })
			if diff := cmp.Diff(tc.want, cn.Spec.Drivers, byName); diff != "" {
				t.Errorf("drivers (-want +got):\n%s", diff)
			}
			n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if n.Labels[zoneKey] != "z1" || n.Labels[rackKey] != "r2" || n.Annotations[AnnNodeID] != `{"`+testDriver+`":"node-id-1"}` {
				t.Errorf("node labels %v annotations %v", n.Labels, n.Annotations)
			}
			if tc.wantWrites == 1 && len(tc.objs) == 1 && (len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].UID != "uid-n1") {
				t.Errorf("created CSINode owner references %v, want the Node", cn.OwnerReferences)
			}
			if p.Healthy() != nil {
				t.Errorf("unhealthy after a successful publish: %v", p.Healthy())
			}
		})
	}
}

func TestRunCleanupOnExit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	other := storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "x"}
	client := fake.NewClientset(node(nil), csiNodeWith(other))
	p, err := NewPublisher(PublisherConfig{NodeName: "n1", CleanupOnExit: true}, client, startNodeDriver(t, ctx, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.Published() != nil, nil
	}); err != nil {
		t.Fatalf("nothing published: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cn, err := client.StorageV1().CSINodes().Get(context.WithoutCancel(ctx), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]storagev1.CSINodeDriver{other}, cn.Spec.Drivers); diff != "" {
		t.Errorf("drivers after cleanup (-want +got):\n%s", diff)
	}
}

// unreachable is a driver whose every call fails, as a restarting driver.
type unreachable struct{ DriverClient }

func (unreachable) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest, ...grpc.CallOption) (*csi.GetPluginInfoResponse, error) {
	return nil, errors.New("connection refused")
}

func (unreachable) Probe(context.Context, *csi.ProbeRequest, ...grpc.CallOption) (*csi.ProbeResponse, error) {
	return nil, errors.New("connection refused")
}

// An unreachable driver keeps the last entry, fails health, and is retried.
func TestDriverUnreachable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(node(nil))
	reg := metrics.NewKubeRegistry()
	p, err := NewPublisher(PublisherConfig{NodeName: "n1"}, client, startNodeDriver(t, ctx, 2), NewPublisherMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	p.driver = unreachable{}
	if err := p.PublishOnce(ctx); err == nil {
		t.Fatal("publish with an unreachable driver succeeded")
	}
	if p.Healthy() == nil {
		t.Error("healthy although the driver is unreachable")
	}
	if !p.probe(ctx) {
		t.Error("probe of a down driver asks for a publish")
	}
	cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || len(cn.Spec.Drivers) != 1 {
		t.Errorf("last entry not kept: %+v, %v", cn, err)
	}
	if p.Published() == nil {
		t.Error("published entry forgotten")
	}
	if _, err := NewPublisher(PublisherConfig{}, client, unreachable{}, nil); err == nil {
		t.Error("publisher without a node name accepted")
	}
}
