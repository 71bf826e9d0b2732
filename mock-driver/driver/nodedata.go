package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// maxDataName bounds an escaped data name, leaving room for ".img" below
// the 255 bytes of a file name.
const maxDataName = 200

// dataName is the name of a volume's data below Config.DataDir: the ID with
// every byte but ASCII letters, digits, '-' and '_' escaped as %XX, so it
// holds no '/' or '.' and cannot be "." or "..", and different IDs get
// different names ("vol-000001" stays as it is). An ID whose escaped form is
// longer than maxDataName gets "~" and the hex SHA-256 of the ID instead; a
// literal '~' is always escaped, so the two forms cannot meet.
func dataName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > maxDataName {
		sum := sha256.Sum256([]byte(id))
		return "~" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// dataPath is where a volume's data live: a directory for a mount volume,
// a file "<name>.img" for a block volume (dataName has no '.', so the two
// cannot meet either).
func (d *Driver) dataPath(id string, block bool) string {
	name := dataName(id)
	if block {
		name += ".img"
	}
	return filepath.Join(d.cfg.DataDir, name)
}

// makeData creates a volume's data directory (or file) and returns its path.
func (d *Driver) makeData(id string, block bool) (string, error) {
	path := d.dataPath(id, block)
	if !block {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return "", status.Errorf(codes.Internal, "creating the data directory of volume %q: %v", id, err)
		}
		return path, nil
	}
	if err := os.MkdirAll(d.cfg.DataDir, 0o750); err != nil {
		return "", status.Errorf(codes.Internal, "creating the data directory %q: %v", d.cfg.DataDir, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return "", status.Errorf(codes.Internal, "creating the data file of block volume %q: %v", id, err)
	}
	return path, nil
}

// bindData publishes a volume with a data directory: it creates the
// volume's data and the target and bind-mounts the data onto the target,
// read-only for a readonly publication. A target that already is a mount of
// the same data with the same readonly flag (a repeated publish, also one
// after a driver restart) is left as it is; with the other readonly flag it
// is ALREADY_EXISTS.
func (d *Driver) bindData(ctx context.Context, id, target string, pub publication) error {
	logger := klog.FromContext(ctx)
	src, err := d.makeData(id, pub.block)
	if err != nil {
		return err
	}
	if err := makeTarget(target, pub.block); err != nil {
		return err
	}
	st, err := readMountState(target)
	if err != nil {
		return status.Errorf(codes.Internal, "reading the mounts of target %q: %v", target, err)
	}
	if st.mounts > 0 {
		same, err := sameFile(src, target)
		if err != nil {
			return status.Errorf(codes.Internal, "comparing target %q with the data of volume %q: %v", target, id, err)
		}
		if !same {
			return status.Errorf(codes.Internal, "target %q is a mount point of something other than the data of volume %q (%s)", target, id, src)
		}
		if st.readonly != pub.readonly {
			return status.Errorf(codes.AlreadyExists, "volume %q is mounted at %q with readonly=%t", id, target, st.readonly)
		}
		logger.V(4).Info("Target already holds the volume's data", "volumeID", id, "target", target, "data", src)
		return nil
	}
	if err := bindMount(src, target, pub.readonly); err != nil {
		return status.Errorf(codes.Internal, "mounting the data of volume %q onto target %q: %v", id, target, err)
	}
	logger.V(2).Info("Bind-mounted the volume's data onto the target", "volumeID", id, "target", target, "data", src, "readonly", pub.readonly)
	return nil
}

// sameFile reports whether a and b are the same file or directory, which a
// bind mount makes of its source and target.
func sameFile(a, b string) (bool, error) {
	ai, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	bi, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(ai, bi), nil
}

// unbindData unpublishes a target of a driver with a data directory: it
// unmounts every mount stacked on the target and removes the target with
// os.Remove, which fails on a non-empty directory instead of deleting
// anything through a mount. A target that is gone is fine.
func (d *Driver) unbindData(ctx context.Context, id, target string) error {
	if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return status.Errorf(codes.Internal, "reading target %q: %v", target, err)
	}
	st, err := readMountState(target)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return status.Errorf(codes.Internal, "reading the mounts of target %q: %v", target, err)
	}
	for range st.mounts {
		if err := unmount(target); err != nil {
			return status.Errorf(codes.Internal, "unmounting target %q of volume %q: %v", target, id, err)
		}
	}
	if st.mounts > 0 {
		klog.FromContext(ctx).V(2).Info("Unmounted the target", "volumeID", id, "target", target, "mounts", st.mounts)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "removing target %q of volume %q: %v", target, id, err)
	}
	return nil
}
