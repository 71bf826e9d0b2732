package images

import (
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// Every build of the binaries uses the same tags: make build and make test
// (the Makefile's BUILDTAGS), make image and the Dockerfile
// (imagebuild.BuildTags, which TestDockerfile holds the Dockerfile to), and
// the tests' own builds (controlplane.ProjectBuildTags).
func TestBuildTagsAgree(t *testing.T) {
	root := repoRoot(t)
	if got := makefileVar(t, root, testVersion, "BUILDTAGS"); got != imagebuild.BuildTags {
		t.Errorf("Makefile BUILDTAGS %q, imagebuild.BuildTags %q", got, imagebuild.BuildTags)
	}
	if controlplane.ProjectBuildTags != imagebuild.BuildTags {
		t.Errorf("controlplane.ProjectBuildTags %q, imagebuild.BuildTags %q", controlplane.ProjectBuildTags, imagebuild.BuildTags)
	}
}

// templateFree are the binaries that must not link html/template: its
// reflective method calls make the linker keep every exported method of
// every type (40% of a binary). csi-topology-scheduler is kube-scheduler,
// whose HTTP server's routes use it.
var templateFree = []string{"csi-node-publisher", "csi-node-router", "csi-provisioner", "csi-scheduler-extender",
	"kubectl-csi_topology", "mock-driver"}

// With the project's build tags, no binary depends on gRPC's
// golang.org/x/net/trace, and only csi-topology-scheduler on html/template.
// A dependency that brings either back fails here, not in a memory
// figure months later.
func TestBinariesLeaveOutTrace(t *testing.T) {
	root := repoRoot(t)
	for _, b := range binaries {
		cmd := exec.Command("go", "list", "-tags", imagebuild.BuildTags, "-deps", "./cmd/"+b.name)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./cmd/%s: %v", b.name, err)
		}
		deps := strings.Fields(string(out))
		if slices.Contains(deps, "golang.org/x/net/trace") {
			t.Errorf("%s depends on golang.org/x/net/trace with -tags %s", b.name, imagebuild.BuildTags)
		}
		if slices.Contains(templateFree, b.name) && slices.Contains(deps, "html/template") {
			t.Errorf("%s depends on html/template", b.name)
		}
	}
}

// The binaries make test runs (bin/, $CSI_TOPOLOGY_TEST_BIN_DIR) were built
// with the project's tags.
func TestBuiltBinariesCarryTags(t *testing.T) {
	dir := os.Getenv(controlplane.BinDirEnv)
	if dir == "" {
		t.Skipf("$%s is not set: no built binaries to read (make test sets it)", controlplane.BinDirEnv)
	}
	for _, b := range binaries {
		info, err := buildinfo.ReadFile(filepath.Join(dir, b.name))
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		var tags string
		for _, s := range info.Settings {
			if s.Key == "-tags" {
				tags = s.Value
			}
		}
		if !slices.Contains(strings.Split(tags, ","), imagebuild.BuildTags) {
			t.Errorf("%s was built with -tags %q, want %q", b.name, tags, imagebuild.BuildTags)
		}
	}
}
