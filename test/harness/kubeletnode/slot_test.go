package kubeletnode

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSlotRecordsItsNode checks what a slot's next holder learns from the
// lock file: the node a dead run left (directory, cgroupRoot, the cgroups
// it created), or nothing after a clean stop.
func TestSlotRecordsItsNode(t *testing.T) {
	for _, tc := range []struct {
		name               string
		dir, cgroupRoot    string
		parents            []string
		wantStale          bool
		wantSocket, wantBr string
	}{
		{name: "dead run", dir: "/tmp/csitp-nodes-1/real-node-1", cgroupRoot: "/a/csi-topology-7",
			parents: []string{"/sys/fs/cgroup/cpu/a"}, wantStale: true,
			wantSocket: "/tmp/csitp-nodes-1/real-node-1/containerd.sock", wantBr: "csitp7"},
		{name: "dead run without created cgroups", dir: "/tmp/x/n", cgroupRoot: "/csi-topology-7", wantStale: true,
			wantSocket: "/tmp/x/n/containerd.sock", wantBr: "csitp7"},
		{name: "clean stop", dir: "", cgroupRoot: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "7.lock"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s := &slot{index: 7, f: f}
			if err := s.record("/old/longer/dir/than/the/next", "/old", []string{"/x", "/y"}); err != nil {
				t.Fatal(err)
			}
			if err := s.record(tc.dir, tc.cgroupRoot, tc.parents); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			old := (&slot{index: 7, previous: string(data)}).stale(Host{})
			if (old != nil) != tc.wantStale {
				t.Fatalf("stale node %+v, want one: %v (file %q)", old, tc.wantStale, data)
			}
			if old == nil {
				return
			}
			if old.Dir != tc.dir || old.CgroupRoot != tc.cgroupRoot || old.ContainerdSocket != tc.wantSocket || old.Bridge != tc.wantBr {
				t.Errorf("stale node dir %q cgroup %q socket %q bridge %q, want %q %q %q %q",
					old.Dir, old.CgroupRoot, old.ContainerdSocket, old.Bridge, tc.dir, tc.cgroupRoot, tc.wantSocket, tc.wantBr)
			}
			if !slices.Equal(old.cgroupParents, tc.parents) && len(old.cgroupParents)+len(tc.parents) != 0 {
				t.Errorf("stale node's created cgroups %q, want %q", old.cgroupParents, tc.parents)
			}
		})
	}
}

// TestHostPath checks where a node keeps the paths its pods see as their
// machine's.
func TestHostPath(t *testing.T) {
	n := &Node{Dir: "/tmp/csitp-nodes-1/real-node-2"}
	for _, tc := range []struct{ path, want string }{
		{"/var/lib/kubelet", "/tmp/csitp-nodes-1/real-node-2/root/var/lib/kubelet"},
		{"/var/lib/csi-mock", "/tmp/csitp-nodes-1/real-node-2/root/var/lib/csi-mock"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if got := n.HostPath(tc.path); got != tc.want {
				t.Errorf("HostPath(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}
