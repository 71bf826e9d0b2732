package kubeletnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop stops the node and removes what it left on the host: kubelet first
// (so that it restarts nothing), then every container process in the
// node's cgroupRoot, the node's containerd shims, containerd, the mounts
// below the node's directory, its cgroups and its bridge. It is
// idempotent.
func (n *Node) Stop() error {
	if n.slot == nil {
		return nil
	}
	if n.kubelet != nil {
		n.kubelet.Stop(15 * time.Second)
	}
	n.killContainers()
	if n.containerd != nil {
		n.containerd.Stop(15 * time.Second)
	}
	if n.mountns != nil {
		n.mountns.Stop(15 * time.Second)
	}
	err := n.cleanUp()
	removeParents(n.cgroupParents)
	_ = n.slot.record("", "", nil)
	n.slot.release()
	n.slot = nil
	return err
}

// cleanUp removes what the node's stopped (or dead) kubelet and containerd
// left: container processes and shims, mounts, cgroups, bridge, directory.
func (n *Node) cleanUp() error {
	n.killContainers()
	var errs []error
	if err := unmountBelow(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := n.host.removeCgroup(n.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	n.removeBridge()
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killContainers kills (SIGKILL) the processes in the node's cgroupRoot
// and the runc shims of the node's containerd (their command line names
// its socket), and waits a little for them to go.
func (n *Node) killContainers() {
	pids := n.host.cgroupPids(n.CgroupRoot)
	pids = append(pids, shimPids(n.ContainerdSocket)...)
	for _, p := range pids {
		if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(n.host.cgroupPids(n.CgroupRoot))+len(shimPids(n.ContainerdSocket)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
}

// shimPids are the processes whose command line has "-address <socket>".
func shimPids(socket string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				pids = append(pids, e.Name())
				break
			}
		}
	}
	return pids
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeBridge deletes the node's CNI bridge, if there is one, and its NAT
// rules.
func (n *Node) removeBridge() {
	n.removeAPIServiceRoute()
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.Bridge)); err == nil {
		_ = exec.Command("ip", "link", "delete", n.Bridge).Run()
	}
}
