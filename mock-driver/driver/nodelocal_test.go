package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
)

// A node-local driver, as a DaemonSet runs it (--mode=both
// --node-topology=kubernetes.io/hostname=<node> --capacity-bytes=...): its
// one segment is its node, with the node's capacity; it makes volumes there
// only, and attaches them to that node only.
func TestNodeLocalDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const hostKey = "kubernetes.io/hostname"
	self := map[string]string{hostKey: "n1"}
	_, c := serve(t, func(cfg *Config) {
		cfg.Mode, cfg.NodeID, cfg.NodeTopology = ModeBoth, "n1", self
		cfg.Segments = []SegmentConfig{{Topology: self, CapacityBytes: 3 * gi}}
	})
	onNode := func(node string) []*csi.Topology {
		return []*csi.Topology{{Segments: map[string]string{hostKey: node}}}
	}

	info, err := c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&csi.Topology{Segments: self}, info.GetAccessibleTopology(), protocmp.Transform()); diff != "" || info.GetNodeId() != "n1" {
		t.Errorf("NodeGetInfo node %q, topology (-want +got):\n%s", info.GetNodeId(), diff)
	}
	capResp, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: onNode("n1")[0]})
	if err != nil || capResp.GetAvailableCapacity() != 3*gi {
		t.Errorf("GetCapacity of the node = %v, %v; want 3 GiB", capResp, err)
	}

	steps := []struct {
		name     string
		req      createReq
		wantCode codes.Code
		wantTopo []*csi.Topology
	}{
		{name: "made on its node", req: makeCreate("a", 2*gi), wantTopo: onNode("n1")},
		{name: "requisite of its node", req: createReq{makeCreate("b", gi).CreateVolumeRequest}, wantTopo: onNode("n1")},
		{name: "node full", req: makeCreate("c", gi), wantCode: codes.ResourceExhausted},
		{name: "another node", req: makeCreate("d", gi), wantCode: codes.ResourceExhausted},
	}
	steps[1].req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n1"), Preferred: onNode("n1")}
	steps[3].req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: onNode("n2")}
	var first string
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			resp, err := c.CreateVolume(ctx, s.req.CreateVolumeRequest)
			if status.Code(err) != s.wantCode {
				t.Fatalf("CreateVolume = %v, want %v", err, s.wantCode)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(s.wantTopo, resp.GetVolume().GetAccessibleTopology(), protocmp.Transform()); diff != "" {
				t.Errorf("accessible topology (-want +got):\n%s", diff)
			}
			if first == "" {
				first = resp.GetVolume().GetVolumeId()
			}
		})
	}
	for node, want := range map[string]codes.Code{"n1": codes.OK, "n2": codes.NotFound} {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: first, NodeId: node, VolumeCapability: mountCap()})
		if status.Code(err) != want {
			t.Errorf("ControllerPublishVolume to %s = %v, want %v", node, err, want)
		}
	}
}
