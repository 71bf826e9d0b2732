//go:build linux

package driver

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"golang.org/x/sys/unix"
)

func TestParseMountInfo(t *testing.T) {
	const table = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 254:0 /data/v /var/lib/kubelet/pods/p/volumes/m rw,relatime shared:1 - ext4 /dev/vda rw
37 22 254:0 /data/a\040b /mnt/a\040b ro,nosuid - ext4 /dev/vda rw
38 22 254:0 /data/w /mnt/stacked rw - ext4 /dev/vda rw
39 38 254:0 /data/w /mnt/stacked ro,relatime - ext4 /dev/vda rw
40 22 254:0 /x /mnt/back\134slash rw - ext4 /dev/vda rw
`
	tests := []struct {
		path    string
		want    mountState
		wantErr bool
	}{
		{path: "/var/lib/kubelet/pods/p/volumes/m", want: mountState{mounts: 1}},
		{path: "/var/lib/kubelet/pods/p/volumes", want: mountState{}},
		{path: "/mnt/a b", want: mountState{mounts: 1, readonly: true}},
		{path: `/mnt/a\040b`, want: mountState{}},
		{path: "/mnt/stacked", want: mountState{mounts: 2, readonly: true}},
		{path: `/mnt/back\slash`, want: mountState{mounts: 1}},
		{path: "/", want: mountState{mounts: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			got, err := parseMountInfo([]byte(table), tc.path)
			if err != nil || got != tc.want {
				t.Errorf("parseMountInfo(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
			}
		})
	}
	if _, err := parseMountInfo([]byte("36 22 254:0 /data\n"), "/data"); err == nil {
		t.Error("a short line parsed")
	}
}

// mountCount counts the mounts on path in the mount table.
func mountCount(t *testing.T, path string) int {
	t.Helper()
	data, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseMountInfo(data, path)
	if err != nil {
		t.Fatal(err)
	}
	return st.mounts
}

// TestNodePublishDataDir publishes with a data directory: real bind mounts,
// so it needs root.
func TestNodePublishDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	const (
		publish   = "publish"
		unpublish = "unpublish"
		write     = "write"   // a file through the target
		read      = "read"    // a file through the target, compared with content
		restart   = "restart" // a new driver with the same configuration
	)
	type step struct {
		op       string
		volume   string
		target   string // below the test's directory
		block    bool
		readonly bool
		file     string // write, read: below the target; "" is the target itself
		content  string
		wantCode codes.Code
		wantErr  error // write: the error wanted
	}
	tests := []struct {
		name  string
		steps []step
		// wantMounts are the mounts on targets at the end.
		wantMounts map[string]int
		// wantGone are paths below the test's directory that must not exist.
		wantGone []string
		// wantData are the files below the data directory and their content.
		wantData map[string]string
		// wantEntries, if set, are all names in the data directory.
		wantEntries []string
	}{
		{
			name: "data survive unpublish and publish",
			steps: []step{
				{op: publish, volume: "v", target: "a/m1"},
				{op: write, target: "a/m1", file: "f", content: "hello"},
				{op: unpublish, volume: "v", target: "a/m1"},
				{op: publish, volume: "v", target: "b/m2"},
				{op: read, target: "b/m2", file: "f", content: "hello"},
			},
			wantMounts:  map[string]int{"a/m1": 0, "b/m2": 1},
			wantGone:    []string{"a/m1"},
			wantData:    map[string]string{"v/f": "hello"},
			wantEntries: []string{"v"},
		},
		{
			name: "readonly publish",
			steps: []step{
				{op: publish, volume: "v", target: "m"},
				{op: write, target: "m", file: "f", content: "x"},
				{op: unpublish, volume: "v", target: "m"},
				{op: publish, volume: "v", target: "r", readonly: true},
				{op: read, target: "r", file: "f", content: "x"},
				{op: write, target: "r", file: "g", content: "y", wantErr: unix.EROFS},
				{op: write, target: "r", file: "f", content: "y", wantErr: unix.EROFS},
			},
			wantMounts: map[string]int{"m": 0, "r": 1},
			wantGone:   []string{"m"},
			wantData:   map[string]string{"v/f": "x"},
		},
		{
			name: "repeat publish is idempotent",
			steps: []step{
				{op: publish, volume: "v", target: "m"},
				{op: publish, volume: "v", target: "m"},
				{op: publish, volume: "v", target: "m", readonly: true, wantCode: codes.AlreadyExists},
			},
			wantMounts: map[string]int{"m": 1},
		},
		{
			name: "publish again after a driver restart",
			steps: []step{
				{op: publish, volume: "v", target: "m"},
				{op: publish, volume: "v", target: "r", readonly: true},
				{op: restart},
				{op: publish, volume: "v", target: "m"},
				{op: publish, volume: "v", target: "r", readonly: true},
				{op: publish, volume: "v", target: "m", readonly: true, wantCode: codes.AlreadyExists},
				{op: publish, volume: "v", target: "r", wantCode: codes.AlreadyExists},
			},
			wantMounts: map[string]int{"m": 1, "r": 1},
		},
		{
			name: "unpublish twice",
			steps: []step{
				{op: publish, volume: "v", target: "m"},
				{op: write, target: "m", file: "f", content: "kept"},
				{op: unpublish, volume: "v", target: "m"},
				{op: unpublish, volume: "v", target: "m"},
				{op: unpublish, volume: "v", target: "never"},
			},
			wantMounts: map[string]int{"m": 0},
			wantGone:   []string{"m", "never"},
			wantData:   map[string]string{"v/f": "kept"},
		},
		{
			name: "another volume's mount at the target",
			steps: []step{
				{op: publish, volume: "v", target: "m"},
				{op: publish, volume: "w", target: "m", wantCode: codes.Internal},
			},
			wantMounts: map[string]int{"m": 1},
		},
		{
			name: "volume IDs cannot escape the data directory",
			steps: []step{
				{op: publish, volume: "../x", target: "m1"},
				{op: write, target: "m1", file: "f", content: "escaped?"},
				{op: publish, volume: "..", target: "m2"},
				{op: publish, volume: "/", target: "m3"},
				{op: publish, volume: ".", target: "m4"},
				{op: publish, volume: "../data", target: "m5", block: true},
				{op: unpublish, volume: "../x", target: "m1"},
			},
			wantMounts:  map[string]int{"m1": 0, "m2": 1, "m3": 1, "m4": 1, "m5": 1},
			wantGone:    []string{"x", "data.img"},
			wantData:    map[string]string{"%2E%2E%2Fx/f": "escaped?"},
			wantEntries: []string{"%2E", "%2E%2E", "%2E%2E%2Fdata.img", "%2E%2E%2Fx", "%2F"},
		},
		{
			name: "block volume",
			steps: []step{
				{op: publish, volume: "v", target: "dev/a", block: true},
				{op: write, target: "dev/a", content: "blocks"},
				{op: unpublish, volume: "v", target: "dev/a"},
				{op: publish, volume: "v", target: "dev/b", block: true},
				{op: read, target: "dev/b", content: "blocks"},
				{op: publish, volume: "v", target: "dev/b", block: true},
			},
			wantMounts:  map[string]int{"dev/a": 0, "dev/b": 1},
			wantGone:    []string{"dev/a"},
			wantData:    map[string]string{"v.img": "blocks"},
			wantEntries: []string{"v.img"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir, err := filepath.EvalSymlinks(t.TempDir()) // the mount table lists resolved paths
			if err != nil {
				t.Fatal(err)
			}
			dataDir := filepath.Join(dir, "data")
			// Registered after t.TempDir, so it runs before the removal. It
			// unmounts until the kernel says there is no mount (EINVAL) and
			// does not trust the code under test to find the mounts.
			t.Cleanup(func() {
				for _, s := range tc.steps {
					if s.target == "" {
						continue
					}
					target := filepath.Join(dir, s.target)
					for range 10 {
						err := unix.Unmount(target, unix.MNT_DETACH)
						if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
							break
						}
						if err != nil {
							t.Errorf("cleaning up the mount on %s: %v", target, err)
							break
						}
					}
				}
			})
			mutate := func(c *Config) { nodeConfig(c); c.DataDir = dataDir }
			d := newTestDriver(t, mutate)
			for i, s := range tc.steps {
				target := filepath.Join(dir, s.target)
				mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
				var err error
				switch s.op {
				case publish:
					_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
						VolumeId: s.volume, TargetPath: target, Readonly: s.readonly, VolumeCapability: capability(s.block, mode),
					})
				case unpublish:
					_, err = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: s.volume, TargetPath: target})
				case write:
					if err := os.WriteFile(filepath.Join(target, s.file), []byte(s.content), 0o640); !errors.Is(err, s.wantErr) {
						t.Errorf("step %d: writing %s: %v, want %v", i, s.file, err, s.wantErr)
					}
				case read:
					got, err := os.ReadFile(filepath.Join(target, s.file))
					if err != nil || string(got) != s.content {
						t.Errorf("step %d: reading %s: %q, %v; want %q", i, s.file, got, err, s.content)
					}
				case restart:
					d = newTestDriver(t, mutate)
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if status.Code(err) != s.wantCode {
					t.Errorf("step %d: %s: code %v (%v), want %v", i, s.op, status.Code(err), err, s.wantCode)
				}
			}
			for target, want := range tc.wantMounts {
				if got := mountCount(t, filepath.Join(dir, target)); got != want {
					t.Errorf("target %s has %d mounts, want %d", target, got, want)
				}
			}
			for _, p := range tc.wantGone {
				if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists (%v), want it gone", p, err)
				}
			}
			for p, want := range tc.wantData {
				got, err := os.ReadFile(filepath.Join(dataDir, p))
				if err != nil || string(got) != want {
					t.Errorf("data %s: %q, %v; want %q", p, got, err, want)
				}
			}
			if tc.wantEntries != nil {
				entries, err := os.ReadDir(dataDir)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				if !slices.Equal(names, tc.wantEntries) {
					t.Errorf("data directory holds %q, want %q", names, tc.wantEntries)
				}
			}
		})
	}
}
