//go:build linux || darwin

package driver

import (
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// fsUsage returns the bytes and inodes of the file system holding path.
func fsUsage(path string) ([]*csi.VolumeUsage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return nil, err
	}
	bsize := int64(st.Bsize)
	total, free, avail := int64(st.Blocks)*bsize, int64(st.Bfree)*bsize, int64(st.Bavail)*bsize
	return []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: total, Available: avail, Used: total - free},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files) - int64(st.Ffree)},
	}, nil
}
