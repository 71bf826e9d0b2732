//go:build !linux

package driver

import "errors"

// errNoMounts is returned by the mount functions off Linux; New refuses a
// data directory there, so they are not reached.
var errNoMounts = errors.New("bind mounts are only supported on Linux")

// mountState is what the mount table says about one mount point.
type mountState struct {
	mounts   int
	readonly bool
}

func readMountState(string) (mountState, error) { return mountState{}, errNoMounts }

func bindMount(string, string, bool) error { return errNoMounts }

func unmount(string) error { return errNoMounts }
