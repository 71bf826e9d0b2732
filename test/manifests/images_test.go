package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// imageRepository is the name prefix `make image` gives the images
// (tools/image's -repository default).
const imageRepository = "csi-topology-provisioner"

// productBinaries are the directories of cmd/ whose images the cluster runs:
// what `make image` builds, less the clientTools.
func productBinaries(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cluster.RepoRoot, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(clientTools, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// clientTools are commands run by users, not by the cluster: `make image`
// builds their images too, but no manifest runs them and kind needs none.
var clientTools = []string{"kubectl-csi_topology"}

// containerImages are the images of every container of the rendered
// Deployments and DaemonSets.
func containerImages(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if img, _, _ := unstructured.NestedString(c.(map[string]any), "image"); img != "" {
				out = append(out, img)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// upShVar reads NAME=value or NAME="value" from deploy/kind/up.sh.
func upShVar(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cluster.RepoRoot, "deploy", "kind", "up.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `="?([^"\n]*)"?$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("deploy/kind/up.sh sets no %s", name)
	}
	return string(m[1])
}

// TestImageReferences fails when the manifests and `make image` drift
// apart: every image of ours that a kustomization names is an image `make
// image` builds; every overlay names them at the tag up.sh builds and
// loads, and the mock and node-local overlays together use all of them;
// up.sh loads exactly those;
// and docs/install.md's overlay names what `make push
// REGISTRY=registry.example.com VERSION=v0.1.0` pushes.
func TestImageReferences(t *testing.T) {
	binaries := productBinaries(t)
	upVersion := upShVar(t, "VERSION")
	if got := strings.Fields(upShVar(t, "IMAGES")); !slices.Equal(sorted(got), binaries) {
		t.Errorf("deploy/kind/up.sh loads the images %q, make image builds %q", got, binaries)
	}
	refs := func(repository, version string) []string {
		var out []string
		for _, b := range binaries {
			out = append(out, imagebuild.Reference(repository, b, version))
		}
		return out
	}
	ours := func(img string) bool { return strings.HasPrefix(img, imageRepository+"/") }

	all := discoverKustomizations(t, cluster.RepoRoot)
	for dir, k := range all {
		if k.component {
			continue
		}
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			objs := render(t, dir)
			for _, img := range containerImages(objs) {
				if !ours(img) {
					continue
				}
				name, _, _ := strings.Cut(img, ":")
				if !slices.Contains(binaries, strings.TrimPrefix(name, imageRepository+"/")) {
					t.Errorf("%s names %s, an image make image does not build (%q)", dir, img, binaries)
				}
				// An overlay can be applied to the quick start's kind
				// cluster: up.sh's tag.
				if want := refs(imageRepository, upVersion); strings.HasPrefix(dir, "deploy/kubernetes/overlays/") && !slices.Contains(want, img) {
					t.Errorf("%s runs %s; deploy/kind/up.sh builds and loads %q (VERSION=%s)", dir, img, want, upVersion)
				}
			}
		})
	}

	// The mock overlay runs every image but csi-node-router, which only
	// node deployment runs (overlays/node-local).
	var mockOurs []string
	for _, dir := range []string{"deploy/kubernetes/overlays/mock", "deploy/kubernetes/overlays/node-local"} {
		for _, img := range containerImages(render(t, dir)) {
			if ours(img) && !slices.Contains(mockOurs, img) {
				mockOurs = append(mockOurs, img)
			}
		}
	}
	slices.Sort(mockOurs)
	if want := refs(imageRepository, upVersion); !slices.Equal(mockOurs, want) {
		t.Errorf("overlays/mock and overlays/node-local run %q; deploy/kind/up.sh builds and loads %q (VERSION=%s)", mockOurs, want, upVersion)
	}

	overlay, _ := writeInstallDocOverlay(t)
	doc := render(t, overlay)
	var pushed []string
	for _, img := range containerImages(doc) {
		if strings.HasPrefix(img, "registry.example.com/") && !strings.HasPrefix(img, "registry.example.com/acme/") {
			pushed = append(pushed, img)
		}
	}
	for _, img := range pushed {
		if !slices.Contains(refs("registry.example.com", "v0.1.0"), img) {
			t.Errorf("docs/install.md's overlay runs %s, which make push REGISTRY=registry.example.com VERSION=v0.1.0 does not push", img)
		}
	}
	if len(pushed) == 0 {
		t.Error("docs/install.md's overlay names none of our images at registry.example.com")
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
