package e2erealnode

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/kubeletnode"
)

// upSh is the kind quick start's script.
const upSh = "deploy/kind/up.sh"

// readUpSh returns deploy/kind/up.sh.
func readUpSh(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cluster.RepoRoot, upSh))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// upShVar is the value of NAME=value or NAME="value" in up.sh.
func upShVar(t *testing.T, script, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `="?([^"\n]*)"?$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("%s sets no %s", upSh, name)
	}
	return m[1]
}

// TestKindQuickStartIsWhatRealNodesRun holds deploy/kind/up.sh to this
// suite, so that the quick start cannot drift from what real nodes proved:
// it applies exactly the kustomization TestRealNodeDeployStatefulSet
// applies; the images it loads for it are those this suite gives the nodes
// (our images in the overlay, at the tag up.sh builds, the registrar being
// upstream's); its StatefulSet uses this suite's class and scheduler; its
// first workers are this suite's nodes, in the zones the suite gives them.
func TestKindQuickStartIsWhatRealNodesRun(t *testing.T) {
	script := readUpSh(t)
	t.Run("kustomization", func(t *testing.T) {
		applied := regexp.MustCompile(`apply -k (\S+)`).FindAllStringSubmatch(script, -1)
		var paths []string
		for _, m := range applied {
			paths = append(paths, m[1])
		}
		if !slices.Equal(paths, []string{mockOverlay}) {
			t.Errorf("%s applies -k %v, the real-node suite %s", upSh, paths, mockOverlay)
		}
	})
	t.Run("images", func(t *testing.T) {
		in, err := kubeletnode.RenderInstall(cluster.RepoRoot, mockOverlay)
		if err != nil {
			t.Fatal(err)
		}
		version := upShVar(t, script, "VERSION")
		loaded := strings.Fields(upShVar(t, script, "IMAGES"))
		var ours []string
		for _, c := range in.Containers() {
			name, tag, _ := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
			if name == "csi-node-driver-registrar" {
				continue
			}
			ours = append(ours, name)
			if !slices.Contains(loaded, name) || tag != version {
				t.Errorf("container %s runs %s; %s loads %v at tag %s", c.Name, c.Image, upSh, loaded, version)
			}
		}
		slices.Sort(ours)
		want := slices.Sorted(slices.Values(kubeletnode.MockOverlayImages))
		if ours = slices.Compact(ours); !slices.Equal(ours, want) {
			t.Errorf("the overlay runs our images %v, the real-node suite loads %v", ours, want)
		}
	})
	t.Run("statefulset", func(t *testing.T) {
		if got := upShVar(t, script, "STORAGE_CLASS"); got != webClass {
			t.Errorf("%s's StatefulSet uses class %s, the real-node suite %s", upSh, got, webClass)
		}
		for _, want := range []string{"schedulerName: csi-topology-scheduler", "topologyKey: " + zoneLabel} {
			if !strings.Contains(script, want) {
				t.Errorf("%s's StatefulSet has no %q, as the real-node suite's", upSh, want)
			}
		}
	})
	t.Run("workers", func(t *testing.T) {
		workers := strings.Fields(upShVar(t, script, "WORKERS"))
		for i, name := range realNodes {
			if i >= len(workers) || workers[i] != name || nodeZones[name] != fmt.Sprintf("z%d", i+1) {
				t.Errorf("real node %d is %s in zone %s; %s's workers are %v in zones z1, z2, ...", i, name, nodeZones[name], upSh, workers)
			}
		}
	})
}
