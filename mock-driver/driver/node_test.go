package driver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
)

func nodeConfig(c *Config) {
	c.Mode = ModeNode
	c.NodeID = "node-1"
	c.NodeTopology = map[string]string{"zone": "z1", "example.com/rack": "r1"}
	c.MaxVolumesPerNode = 3
}

func TestNodeGetInfo(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   *csi.NodeGetInfoResponse
	}{
		{
			name:   "topology",
			mutate: nodeConfig,
			want: &csi.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: 3, AccessibleTopology: &csi.Topology{
				Segments: map[string]string{TopologyPrefix + "zone": "z1", "example.com/rack": "r1"}}},
		},
		{
			name:   "topology disabled",
			mutate: func(c *Config) { nodeConfig(c); c.DisableTopology = true },
			want:   &csi.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			got, err := newTestDriver(t, tc.mutate).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("NodeGetInfo (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodePublish(t *testing.T) {
	ssw := csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	smw := csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	type step struct {
		unpublish bool
		volume    string
		target    string // below the test's directory; "" for none
		block     bool
		readonly  bool
		mode      csi.VolumeCapability_AccessMode_Mode
		wantCode  codes.Code
	}
	tests := []struct {
		name  string
		steps []step
		// wantTargets are the targets that exist at the end.
		wantTargets []string
	}{
		{
			name:        "publish twice, unpublish twice",
			steps:       []step{{volume: "v", target: "a/mount"}, {volume: "v", target: "a/mount"}, {unpublish: true, volume: "v", target: "a/mount"}, {unpublish: true, volume: "v", target: "a/mount"}},
			wantTargets: nil,
		},
		{
			name:        "block target is a file",
			steps:       []step{{volume: "v", target: "dev/v", block: true}},
			wantTargets: []string{"dev/v"},
		},
		{
			name:        "same target, other readonly flag",
			steps:       []step{{volume: "v", target: "m"}, {volume: "v", target: "m", readonly: true, wantCode: codes.AlreadyExists}},
			wantTargets: []string{"m"},
		},
		{
			name:        "single writer at a second target",
			steps:       []step{{volume: "v", target: "m1", mode: ssw}, {volume: "v", target: "m2", mode: ssw, wantCode: codes.FailedPrecondition}},
			wantTargets: []string{"m1"},
		},
		{
			name:        "single node multi writer at two targets",
			steps:       []step{{volume: "v", target: "m1", mode: smw}, {volume: "v", target: "m2", mode: smw}},
			wantTargets: []string{"m1", "m2"},
		},
		{
			name: "arguments",
			steps: []step{
				{volume: "", target: "m", wantCode: codes.InvalidArgument},
				{volume: "v", target: "", wantCode: codes.InvalidArgument},
				{unpublish: true, volume: "v", target: "", wantCode: codes.InvalidArgument},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			d := newTestDriver(t, nodeConfig)
			dir := t.TempDir()
			for i, s := range tc.steps {
				target := ""
				if s.target != "" {
					target = filepath.Join(dir, s.target)
				}
				mode := s.mode
				if mode == 0 {
					mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
				}
				var err error
				if s.unpublish {
					_, err = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: s.volume, TargetPath: target})
				} else {
					_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
						VolumeId: s.volume, TargetPath: target, Readonly: s.readonly, VolumeCapability: capability(s.block, mode),
					})
				}
				if status.Code(err) != s.wantCode {
					t.Errorf("step %d: code %v (%v), want %v", i, status.Code(err), err, s.wantCode)
				}
			}
			for _, target := range tc.wantTargets {
				if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
					t.Errorf("target %s: %v", target, err)
				}
			}
			if len(tc.wantTargets) == 0 {
				if entries, _ := os.ReadDir(filepath.Join(dir, "a")); len(entries) != 0 {
					t.Errorf("targets left behind: %v", entries)
				}
			}
		})
	}
}

func TestNodeGetVolumeStats(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := newTestDriver(t, nodeConfig)
	dir := t.TempDir()
	mount, block := filepath.Join(dir, "mount"), filepath.Join(dir, "block")
	for _, p := range []struct {
		target string
		block  bool
	}{{mount, false}, {block, true}} {
		if _, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: "v-" + filepath.Base(p.target), TargetPath: p.target, VolumeCapability: capability(p.block, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(block, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		id, path  string
		wantCode  codes.Code
		wantTotal func(int64) bool
	}{
		{name: "mount volume", id: "v-mount", path: mount, wantTotal: func(n int64) bool { return n > 0 }},
		{name: "block volume", id: "v-block", path: block, wantTotal: func(n int64) bool { return n == 4096 }},
		{name: "other path", id: "v-mount", path: "some/path", wantCode: codes.NotFound},
		{name: "unknown volume", id: "v-other", path: mount, wantCode: codes.NotFound},
		{name: "no ID", path: mount, wantCode: codes.InvalidArgument},
		{name: "no path", id: "v-mount", wantCode: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: tc.id, VolumePath: tc.path})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if err != nil {
				return
			}
			bytes := resp.GetUsage()[0]
			if bytes.GetUnit() != csi.VolumeUsage_BYTES || !tc.wantTotal(bytes.GetTotal()) {
				t.Errorf("usage %v", resp.GetUsage())
			}
		})
	}
	// A target removed behind the driver's back is NOT_FOUND.
	if err := os.RemoveAll(mount); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v-mount", VolumePath: mount}); status.Code(err) != codes.NotFound {
		t.Errorf("removed target: code %v, want NotFound", status.Code(err))
	}
}
