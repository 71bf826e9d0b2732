package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// releasePagesEnv turns the release of start-up pages (releaseStartupPages)
// on ("true", "1") or off ("false", "0") whatever the mode (strconv.ParseBool);
// unset, a --node-deployment instance releases them and a central
// provisioner does not.
const releasePagesEnv = "CSI_PROVISIONER_RELEASE_STARTUP_PAGES"

// releaseStartupPages says whether this process hands back the pages of its
// binary that start-up touched (see releaseBinaryPages): by default on a
// node's instance, where a DaemonSet pays every megabyte once per node.
// A value of releasePagesEnv that is not a boolean is an error.
func releaseStartupPages(nodeDeployment bool, getenv func(string) string) (bool, error) {
	v := getenv(releasePagesEnv)
	if v == "" {
		return nodeDeployment, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", releasePagesEnv, v)
	}
	return on, nil
}

// pageRelease is one release of the binary's pages, for its log line.
type pageRelease struct {
	// Mapped is the size of the binary's read-only mappings advised.
	Mapped int64
	// Before and After are the resident bytes of those mappings (Rss in
	// /proc/self/smaps) around the release.
	Before, After int64
}

// releasePages releases the binary's start-up pages and logs what it
// gave back; phase names the moment ("start", "synced"). A failure is
// logged and nothing else: nothing depends on the release.
func releasePages(logger klog.Logger, phase string) {
	r, err := releaseBinaryPages()
	if err != nil {
		logger.Info("Could not release the binary's start-up pages", "phase", phase, "err", err)
		return
	}
	logger.Info("Released the binary's pages that start-up used; those in use come back on first use",
		"phase", phase, "mappedMB", mb(r.Mapped), "residentFileMBBefore", mb(r.Before), "residentFileMBAfter", mb(r.After))
}

// releaseWhenLeading calls release once leading reports true (the
// controller's caches have synced and it works): what start-up alone ran
// (clients, the driver's probe, the first lists) is not needed again. It
// polls every second and returns without release when ctx is done first.
func releaseWhenLeading(ctx context.Context, leading func() bool, release func()) {
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) { return leading(), nil })
	if err == nil {
		release()
	}
}

// mb is bytes in MB with one decimal, for logs.
func mb(b int64) string { return strconv.FormatFloat(float64(b)/1e6, 'f', 1, 64) }
