package kubeletnode

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// ImageRepository and ImageVersion name the images the lab builds for its
// real nodes: <ImageRepository>/<binary>:<ImageVersion>, as `make image`
// names the project's (with its VERSION).
const (
	ImageRepository = "csi-topology-provisioner"
	ImageVersion    = "lab"
)

// Pause, RWCheck, APICheck and Registrar are the lab's own node images,
// built from test/harness/kubeletnode/images/cmd: the pod sandbox, a container that
// writes a file and reads it back, an in-cluster client of the API server,
// and the stand-in for node-driver-registrar (see their package docs).
const (
	Pause     = "pause"
	RWCheck   = "rwcheck"
	APICheck  = "apicheck"
	Registrar = "registrar"
)

// Images are what every node imports into its containerd.
type Images struct {
	// Sandbox is the pod sandbox image, as containerd's CRI names it.
	Sandbox string
	// Tarballs are the archives to import.
	Tarballs []string
	// Refs maps a binary to its image's reference, as a pod names it.
	Refs map[string]string
}

// Ref is the reference of binary's image, as a pod names it.
func (i Images) Ref(binary string) string { return i.Refs[binary] }

// BuildImages builds, with tools/image (as `make image` does, for this
// host's architecture only), the lab's pause and rwcheck images and the
// images of the project's commands in project (e.g. "mock-driver"), into
// outDir.
func BuildImages(ctx context.Context, repoRoot, outDir string, project ...string) (Images, error) {
	imgs := Images{Refs: map[string]string{}}
	// The registrar runs as root, as upstream's node-driver-registrar
	// image does: it connects to the driver's socket, which a root driver
	// makes 0755.
	sets := []struct {
		root     string
		binaries []string
		asRoot   []string
	}{
		{filepath.Join(repoRoot, "test", "harness", "kubeletnode", "images"), []string{Pause, RWCheck, APICheck, Registrar}, []string{Registrar}},
		{repoRoot, project, nil},
	}
	for _, s := range sets {
		if len(s.binaries) == 0 {
			continue
		}
		results, err := imagebuild.Build(ctx, imagebuild.Config{
			Root: s.root, Binaries: s.binaries, OutDir: outDir,
			Platforms:  []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
			Repository: ImageRepository, Version: ImageVersion,
			LDFlags: "-s -w -X main.version=" + ImageVersion, Created: time.Unix(0, 0).UTC(),
			RootBinaries: s.asRoot,
		})
		if err != nil {
			return imgs, fmt.Errorf("building the images %v: %w", s.binaries, err)
		}
		for _, r := range results {
			imgs.Refs[r.Binary] = r.Reference
			imgs.Tarballs = append(imgs.Tarballs, r.Images[0].Tarball)
		}
	}
	// containerd's CRI names an image by its normalized reference.
	imgs.Sandbox = "docker.io/" + imgs.Refs[Pause]
	return imgs, nil
}
