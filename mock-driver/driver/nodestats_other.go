//go:build !linux && !darwin

package driver

import (
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// fsUsage is not available on this platform.
func fsUsage(string) ([]*csi.VolumeUsage, error) {
	return nil, errors.New("file system statistics are only read on Linux and macOS")
}
