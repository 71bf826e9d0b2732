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
// binary's start-up pages (cmd/csi-provisioner, releasePages); its values
// are read with releasedValue, in whatever order the logger writes them.
var releasedLine = regexp.MustCompile(`"Released the binary's pages that start-up used[^"]*".*`)

// releasedValue returns the value of key in a releasedLine.
func releasedValue(line, key string) string {
	m := regexp.MustCompile(` ` + key + `="([^"]*)"`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1]
}

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
		var found []string
		// The second release follows /readyz by up to a second.
		err := nl.Cluster.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) {
			log, err := os.ReadFile(p.LogPath())
			if err != nil {
				return false, err
			}
			found = releasedLine.FindAllString(string(log), -1)
			return len(found) >= len(want), nil
		})
		var phases []string
		for _, line := range found {
			phase := releasedValue(line, "phase")
			phases = append(phases, phase)
			mapped, _ := strconv.ParseFloat(releasedValue(line, "mappedMB"), 64)
			before, _ := strconv.ParseFloat(releasedValue(line, "residentFileMBBefore"), 64)
			after, _ := strconv.ParseFloat(releasedValue(line, "residentFileMBAfter"), 64)
			if mapped <= 0 || before <= 0 || after >= before {
				t.Errorf("%s's instance, release at %s: %v MB advised, resident pages of the binary %v MB before and %v MB after; want fewer after",
					node, phase, mapped, before, after)
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
