//go:build linux

package driver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfoPath lists the mounts of the driver's mount namespace.
const mountInfoPath = "/proc/self/mountinfo"

// mountState is what the mount table says about one mount point.
type mountState struct {
	// mounts counts the mounts stacked on the mount point (0: it is none).
	mounts int
	// readonly is the per-mount read-only flag of the top mount.
	readonly bool
}

// readMountState looks path up in /proc/self/mountinfo. The mount table is
// the only reliable test: a bind mount of a directory of the same file
// system has the same st_dev as its parent. path is resolved first, as the
// table lists resolved paths.
func readMountState(path string) (mountState, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return mountState{}, err
	}
	data, err := readMountInfo()
	if err != nil {
		return mountState{}, err
	}
	return parseMountInfo(data, resolved)
}

// readMountInfo reads the mount table until two reads agree: the kernel
// builds a large table over several reads, and a mount or unmount between
// them (the kubelet mounts concurrently) can tear it.
func readMountInfo() ([]byte, error) {
	prev, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, err
	}
	for range 3 {
		cur, err := os.ReadFile(mountInfoPath)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return nil, fmt.Errorf("%s kept changing while read", mountInfoPath)
}

// parseMountInfo finds the mounts on path in a mountinfo table (proc(5)):
// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw", where
// the fifth field is the mount point and the sixth the per-mount options.
func parseMountInfo(data []byte, path string) (mountState, error) {
	var st mountState
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 6 {
			return mountState{}, fmt.Errorf("malformed %s line %q", mountInfoPath, line)
		}
		if unescapeMountInfo(fields[4]) != path {
			continue
		}
		st.mounts++
		st.readonly = slices.Contains(strings.Split(fields[5], ","), "ro")
	}
	return st, nil
}

// unescapeMountInfo undoes the octal escapes of a mountinfo path: "\040"
// for a space, "\011" tab, "\012" newline, "\134" backslash.
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// bindMount bind-mounts src onto target, a directory onto a directory or a
// file onto a file. A read-only bind mount takes a second, remounting call
// (the kernel ignores MS_RDONLY with MS_BIND); the remount keeps the flags
// the mount inherited from src's file system (nosuid, nodev, ...), which the
// kernel refuses to drop in a user namespace. A failed remount is undone.
func bindMount(src, target string, readonly bool) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %q onto %q: %w", src, target, err)
	}
	if !readonly {
		return nil
	}
	var st unix.Statfs_t
	err := unix.Statfs(target, &st)
	if err == nil {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | kept(int64(st.Flags)))
		if err = unix.Mount("", target, "", flags, ""); err != nil {
			err = fmt.Errorf("remounting %q read-only: %w", target, err)
		}
	} else {
		err = fmt.Errorf("reading the mount flags of %q: %w", target, err)
	}
	if err != nil {
		if uerr := unix.Unmount(target, 0); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undoing the bind mount on %q: %w", target, uerr))
		}
		return err
	}
	return nil
}

// kept maps the statfs flags a remount must keep to mount flags.
func kept(stFlags int64) int {
	flags := 0
	for _, f := range []struct {
		st    int64
		mount int
	}{
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if stFlags&f.st != 0 {
			flags |= f.mount
		}
	}
	return flags
}

// unmount unmounts target; a target that is no mount point (EINVAL) or is
// gone (ENOENT) is fine.
func unmount(target string) error {
	err := unix.Unmount(target, 0)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmounting %q: %w", target, err)
}
