//go:build !linux

package main

import "errors"

// releaseBinaryPages is Linux's (madvise on the binary's mappings).
func releaseBinaryPages() (pageRelease, error) {
	return pageRelease{}, errors.New("not supported on this system")
}
