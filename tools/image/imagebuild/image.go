package imagebuild

import (
	"fmt"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// newImage assembles the image of binary for platform p from nothing
// (BaseImage) but the base layer and the binary's layer, with ImageConfig,
// every date Config.Created. Its media types are OCI's.
func (c *Config) newImage(binary string, p v1.Platform, base, bin layerFile) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: c.Created.UTC()}
	var adds []mutate.Addendum
	for _, l := range []struct {
		file layerFile
		by   string
	}{
		{base, "imagebuild: /etc/passwd and /etc/group (root, nonroot 65532), /home/nonroot, /tmp"},
		{bin, "imagebuild: /" + binary + " (go build -trimpath, CGO_ENABLED=0)"},
	} {
		layer, err := tarball.LayerFromFile(l.file.path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: layer, History: v1.History{Created: created, CreatedBy: l.by}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = c.ImageConfig(binary)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config of %s for %s: %w", binary, p, err)
	}
	return img, nil
}

// ImageConfig is the run configuration of the image of binary: entrypoint
// /<binary>, user UserOf(binary) (RootUser for RootBinaries), working directory /, PATH as BuildKit gives an
// image built FROM scratch (nothing in the images uses it), and the labels.
// The Dockerfile at the repository's root gives the same (test/images).
func (c *Config) ImageConfig(binary string) v1.Config {
	user := UserOf(binary)
	if slices.Contains(c.RootBinaries, binary) {
		user = RootUser
	}
	return v1.Config{
		Entrypoint: []string{"/" + binary},
		User:       user,
		WorkingDir: "/",
		Env:        []string{"PATH=" + Path},
		Labels:     c.labels(binary),
	}
}

// newIndex is the multi-platform index of one binary's images, in the order
// of Config.Platforms, annotated with the image labels.
func (c *Config) newIndex(binary string, imgs []v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for i, img := range imgs {
		p := c.Platforms[i]
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	out, ok := mutate.Annotations(idx, c.labels(binary)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index of %s", binary)
	}
	return out, nil
}
