package e2enode

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// releasedLine matches csi-provisioner's log line of a release of its
// binary's start-up pages (cmd/csi-provisioner, releasePages).
var releasedLine = regexp.MustCompile(`"Released the binary's pages that start-up used[^"]*" phase="(\w+)" mappedMB="([\d.]+)" residentFileMBBefore="([\d.]+)" residentFileMBAfter="([\d.]+)"`)

// Every node's instance hands back the pages of its binary that start-up
// used: once its flags are parsed, and once its caches have synced and it
// provisions. Each release leaves fewer of the binary's pages resident than
// before it, and the instances go on provisioning (the other tests of this
// package run on them). With CSI_PROVISIONER_RELEASE_STARTUP_PAGES=false
// in this test's environment (the instances inherit it), none releases.
func TestNodeInstanceReleasesStartupPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	want := []string{"start", "synced"}
	if v, err := strconv.ParseBool(os.Getenv("CSI_PROVISIONER_RELEASE_STARTUP_PAGES")); err == nil && !v {
		want = nil
	}
	for _, node := range nl.Names {
		p := nl.Node(node).Provisioner()
		var found [][]string
		// The second release follows /readyz by up to a second.
		err := nl.Cluster.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) {
			log, err := os.ReadFile(p.LogPath())
			if err != nil {
				return false, err
			}
			found = releasedLine.FindAllStringSubmatch(string(log), -1)
			return len(found) >= len(want), nil
		})
		var phases []string
		for _, m := range found {
			phases = append(phases, m[1])
			mapped, _ := strconv.ParseFloat(m[2], 64)
			before, _ := strconv.ParseFloat(m[3], 64)
			after, _ := strconv.ParseFloat(m[4], 64)
			if mapped <= 0 || after >= before {
				t.Errorf("%s's instance, release at %s: %s MB advised, resident file pages %s MB before and %s MB after; want fewer after",
					node, m[1], m[2], m[3], m[4])
			}
		}
		if err != nil && want != nil {
			t.Fatalf("%s's instance logged releases %v, want %v: %v", node, phases, want, err)
		}
		if strings.Join(phases, ",") != strings.Join(want, ",") {
			t.Errorf("%s's instance released its start-up pages at %v, want %v", node, phases, want)
		}
	}
}
