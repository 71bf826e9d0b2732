package driver

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

func TestControllerPublish(t *testing.T) {
	type publish struct {
		volume   string // name of a volume the test creates; "missing" is not created
		node     string
		readonly bool
		mode     csi.VolumeCapability_AccessMode_Mode
		wantCode codes.Code
	}
	sw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	mw := csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	tests := []struct {
		name   string
		mutate func(*Config)
		steps  []publish
		want   map[string][]string // volume name -> published nodes at the end
	}{
		{
			name:   "node limit",
			mutate: func(c *Config) { c.MaxVolumesPerNode = 2 },
			steps: []publish{
				{volume: "a", node: "n1"}, {volume: "b", node: "n1"},
				{volume: "c", node: "n1", wantCode: codes.ResourceExhausted},
				{volume: "a", node: "n1"}, // idempotent, not counted twice
				{volume: "c", node: "n2"},
			},
			want: map[string][]string{"a": {"n1"}, "b": {"n1"}, "c": {"n2"}},
		},
		{
			name:   "per-node limit overrides the default",
			mutate: func(c *Config) { c.MaxVolumesPerNode = 5; c.NodeLimits = map[string]int64{"small": 1} },
			steps: []publish{
				{volume: "a", node: "small"}, {volume: "b", node: "small", wantCode: codes.ResourceExhausted},
				{volume: "b", node: "big"},
			},
			want: map[string][]string{"a": {"small"}, "b": {"big"}, "c": {}},
		},
		{
			name:  "unknown volume",
			steps: []publish{{volume: "missing", node: "n1", wantCode: codes.NotFound}},
			want:  map[string][]string{"a": {}, "b": {}, "c": {}},
		},
		{
			name:   "unknown node",
			mutate: func(c *Config) { c.KnownNodes = []string{"n1"} },
			steps:  []publish{{volume: "a", node: "n2", wantCode: codes.NotFound}, {volume: "a", node: "n1"}},
			want:   map[string][]string{"a": {"n1"}, "b": {}, "c": {}},
		},
		{
			name:  "readonly differs",
			steps: []publish{{volume: "a", node: "n1"}, {volume: "a", node: "n1", readonly: true, wantCode: codes.AlreadyExists}},
			want:  map[string][]string{"a": {"n1"}, "b": {}, "c": {}},
		},
		{
			name:  "single-node volume on a second node",
			steps: []publish{{volume: "a", node: "n1"}, {volume: "a", node: "n2", wantCode: codes.FailedPrecondition}},
			want:  map[string][]string{"a": {"n1"}, "b": {}, "c": {}},
		},
		{
			name:  "multi-node volume on two nodes",
			steps: []publish{{volume: "m", node: "n1", mode: mw}, {volume: "m", node: "n2", mode: mw}},
			want:  map[string][]string{"a": {}, "b": {}, "c": {}, "m": {"n1", "n2"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, tc.mutate)
			ids := map[string]string{"missing": "vol-999999"}
			for _, name := range []string{"a", "b", "c", "m"} {
				r := makeCreate(name, gi/4)
				if name == "m" {
					r.VolumeCapabilities = []*csi.VolumeCapability{capability(false, mw)}
				}
				if _, ok := tc.want[name]; !ok {
					continue
				}
				resp, err := d.CreateVolume(ctx, r.CreateVolumeRequest)
				if err != nil {
					t.Fatal(err)
				}
				ids[name] = resp.GetVolume().GetVolumeId()
			}
			for i, s := range tc.steps {
				mode := s.mode
				if mode == 0 {
					mode = sw
				}
				_, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
					VolumeId: ids[s.volume], NodeId: s.node, Readonly: s.readonly, VolumeCapability: capability(false, mode),
				})
				if status.Code(err) != s.wantCode {
					t.Errorf("step %d (%s on %s): code %v (%v), want %v", i, s.volume, s.node, status.Code(err), err, s.wantCode)
				}
			}
			got := map[string][]string{}
			for _, v := range d.Volumes() {
				got[v.Name] = v.PublishedNodes()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("published nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControllerUnpublish(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, func(c *Config) { c.MaxVolumesPerNode = 1 })
	resp, err := d.CreateVolume(ctx, makeCreate("a", gi).CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	second, err := d.CreateVolume(ctx, makeCreate("b", gi).CreateVolumeRequest)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(vol string) error {
		_, err := d.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "n1", VolumeCapability: mountCap()})
		return err
	}
	if err := publish(id); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		req      *csi.ControllerUnpublishVolumeRequest
		wantCode codes.Code
	}{
		{name: "published", req: &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}},
		{name: "again", req: &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}},
		{name: "unknown volume", req: &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-999999", NodeId: "n1"}},
		{name: "no volume ID", req: &csi.ControllerUnpublishVolumeRequest{NodeId: "n1"}, wantCode: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.ControllerUnpublishVolume(ctx, tc.req); status.Code(err) != tc.wantCode {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
		})
	}
	// The node's one slot is free again.
	if err := publish(second.GetVolume().GetVolumeId()); err != nil {
		t.Errorf("publishing after unpublish: %v", err)
	}
}
