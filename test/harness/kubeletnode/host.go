package kubeletnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/klog/v2"
)

// hostPackages are the Debian packages whose commands a node runs: runc
// (containerd's runtime), iptables (the node's NAT chain for the API
// server's Service; kubelet's canary chains), mount (util-linux, for
// kubelet's mounter and the node's mount namespace), unshare and nsenter
// (util-linux, the node's mount namespace) and ip (iproute2, the node's
// bridge).
var hostPackages = map[string]string{
	"runc": "runc", "iptables": "iptables", "mount": "mount",
	"unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2",
}

// requiredControllers are the cgroup v1 controllers that kubelet and runc
// need for pods on a node.
var requiredControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids"}

// Host is what CheckHost found: where each cgroup v1 controller is mounted
// and the commands from the host's packages.
type Host struct {
	// Mounts maps a cgroup v1 controller to its hierarchy's mount point.
	Mounts map[string]string
	// Runc is the runc binary.
	Runc string
	// OwnCgroup is the test process's memory cgroup, under which every
	// node's cgroupRoot is made.
	OwnCgroup string
	// Unified is the cgroup v2 mount of a hybrid host ("" if none), where
	// runc also makes the containers' cgroups.
	Unified string
}

// CheckHost says whether this host can run real nodes, and exactly why
// not: it must be root, with cgroup v1 controllers mounted (kubelet runs
// them with failCgroupV1: false) and runc, iptables and mount installed.
// Missing commands are installed with apt-get when it exists.
func CheckHost(ctx context.Context) (Host, error) {
	h := Host{Mounts: map[string]string{}}
	if os.Geteuid() != 0 {
		return h, fmt.Errorf("real nodes need root (kubelet mounts, containerd runs runc); running as uid %d", os.Geteuid())
	}
	if err := h.findCgroups(); err != nil {
		return h, err
	}
	if err := installMissing(ctx); err != nil {
		return h, err
	}
	var err error
	if h.Runc, err = exec.LookPath("runc"); err != nil {
		return h, fmt.Errorf("runc not found after installing it: %w", err)
	}
	return h, nil
}

// findCgroups reads /proc/self/mountinfo for the cgroup v1 hierarchies and
// /proc/self/cgroup for the process's own memory cgroup.
func (h *Host) findCgroups() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(postFields) >= 1 && postFields[0] == "cgroup2" {
			h.Unified = fields[4]
		}
		if !ok || len(fields) < 5 || len(postFields) < 3 || postFields[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(postFields[2], ",") {
			h.Mounts[opt] = fields[4]
		}
	}
	var missing []string
	for _, c := range requiredControllers {
		if h.Mounts[c] == "" {
			missing = append(missing, c)
		}
	}
	if len(missing) != 0 {
		return fmt.Errorf("real nodes need the cgroup v1 controllers %v mounted (this lab runs kubelet with cgroupfs on cgroup v1); missing: %v", requiredControllers, missing)
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	h.OwnCgroup = "/"
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			h.OwnCgroup = parts[2]
		}
	}
	return nil
}

// installMissing installs the packages of the missing host commands with
// apt-get (updating its lists first when an install fails).
func installMissing(ctx context.Context) error {
	var pkgs []string
	for cmd, pkg := range hostPackages {
		if _, err := exec.LookPath(cmd); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		return fmt.Errorf("real nodes need the packages %v, and there is no apt-get to install them", pkgs)
	}
	klog.FromContext(ctx).Info("Installing the packages real nodes need", "packages", pkgs)
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, apt, append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return nil
	}
	if out, err := exec.CommandContext(ctx, apt, "update").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update, to install %v: %w\n%s", pkgs, err, out)
	}
	if out, err := install(); err != nil {
		return fmt.Errorf("apt-get install %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// makeCgroup creates path (a cgroup path, "/a/b") in every mounted cgroup
// v1 hierarchy: kubelet requires its cgroupRoot to exist in each. It
// returns the directories it created above path (the test process's
// memory cgroup path does not exist in the other hierarchies), for
// removeParents.
func (h Host) makeCgroup(path string) (created []string, err error) {
	for _, mnt := range h.mountPoints() {
		for dir := filepath.Dir(path); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(mnt, dir)); errors.Is(err, os.ErrNotExist) {
				created = append(created, filepath.Join(mnt, dir))
			}
		}
		if err := os.MkdirAll(filepath.Join(mnt, path), 0o755); err != nil {
			return created, fmt.Errorf("creating cgroup %s: %w", path, err)
		}
	}
	return created, nil
}

// removeParents removes the directories makeCgroup created above a node's
// cgroup, deepest first, unless another node's cgroup is still below one.
func removeParents(created []string) {
	sort.Slice(created, func(i, j int) bool { return len(created[i]) > len(created[j]) })
	for _, d := range created {
		_ = os.Remove(d)
	}
}

// removeCgroup removes path and the cgroups below it from every hierarchy,
// deepest first; a cgroup that still has processes stays (and is
// reported).
func (h Host) removeCgroup(path string) error {
	var errs []error
	for _, mnt := range h.removalPoints() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(mnt, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removalPoints are mountPoints and, on a hybrid host, the cgroup v2
// mount.
func (h Host) removalPoints() []string {
	if h.Unified == "" {
		return h.mountPoints()
	}
	return append(h.mountPoints(), h.Unified)
}

// mountPoints are the distinct cgroup v1 mount points.
func (h Host) mountPoints() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range h.Mounts {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// cgroupPids are the processes in path and the cgroups below it, in the
// pids hierarchy.
func (h Host) cgroupPids(path string) []string {
	var pids []string
	_ = filepath.WalkDir(filepath.Join(h.Mounts["pids"], path), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		if data, err := os.ReadFile(p); err == nil {
			pids = append(pids, strings.Fields(string(data))...)
		}
		return nil
	})
	return pids
}
