package imagebuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/klog/v2"
)

// Result is what Build made for one binary.
type Result struct {
	Binary string
	// Reference is <Repository>/<binary>:<Version>.
	Reference string
	// Layout is the OCI image layout directory; its index.json names Index.
	Layout string
	// Index is the digest of the multi-platform index.
	Index v1.Hash
	// Images are the per-platform images, in the order of Config.Platforms.
	Images []PlatformImage
}

// PlatformImage is one platform's image of a binary.
type PlatformImage struct {
	Platform v1.Platform
	Digest   v1.Hash
	// Tarball is the `docker load` archive of this image alone.
	Tarball string
	// Compressed and Uncompressed are the sums of the layers' sizes (what a
	// pull downloads, and what it unpacks to); the config is not counted.
	Compressed, Uncompressed int64
}

// Build compiles the binaries for every platform and writes, for each
// binary, the OCI layout OutDir/<binary>/ and the tarballs
// OutDir/<binary>-<arch>.tar. Previous outputs of the same names are
// replaced.
func Build(ctx context.Context, cfg Config) ([]Result, error) {
	logger := klog.FromContext(ctx)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(cfg.OutDir, ".work-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	base, err := writeLayer(filepath.Join(work, "base.tar.gz"), baseEntries(), cfg.Created)
	if err != nil {
		return nil, err
	}
	// imgs[b][i]: the image of binary b for platform i.
	imgs := map[string][]v1.Image{}
	sizes := map[string][]int64{}
	for _, p := range cfg.Platforms {
		dir := filepath.Join(work, p.OS+"-"+p.Architecture)
		logger.Info("Compiling", "platform", p.String(), "binaries", cfg.Binaries)
		if err := cfg.compile(ctx, p, dir); err != nil {
			return nil, err
		}
		for _, b := range cfg.Binaries {
			bin, err := writeLayer(filepath.Join(dir, b+".tar.gz"), []entry{{name: b, mode: 0o755, path: filepath.Join(dir, b)}}, cfg.Created)
			if err != nil {
				return nil, err
			}
			img, err := cfg.newImage(b, p, base, bin)
			if err != nil {
				return nil, err
			}
			imgs[b] = append(imgs[b], img)
			sizes[b] = append(sizes[b], base.uncompressed+bin.uncompressed)
		}
	}
	var out []Result
	for _, b := range cfg.Binaries {
		r, err := cfg.write(b, imgs[b], sizes[b])
		if err != nil {
			return nil, err
		}
		logger.Info("Built image", "image", r.Reference, "index", r.Index.String(), "layout", r.Layout)
		out = append(out, r)
	}
	return out, nil
}

// write writes the layout and the tarballs of one binary.
func (c *Config) write(binary string, imgs []v1.Image, uncompressed []int64) (Result, error) {
	r := Result{Binary: binary, Reference: Reference(c.Repository, binary, c.Version), Layout: filepath.Join(c.OutDir, binary)}
	tag, err := name.NewTag(r.Reference)
	if err != nil {
		return r, err
	}
	idx, err := c.newIndex(binary, imgs)
	if err != nil {
		return r, err
	}
	if r.Index, err = idx.Digest(); err != nil {
		return r, err
	}
	if err := os.RemoveAll(r.Layout); err != nil {
		return r, err
	}
	lp, err := layout.Write(r.Layout, empty.Index)
	if err != nil {
		return r, err
	}
	// ref.name is the tag (as skopeo and the OCI spec read it);
	// containerd's import reads the full name.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": c.Version,
		"io.containerd.image.name":          r.Reference,
	})); err != nil {
		return r, fmt.Errorf("layout of %s: %w", binary, err)
	}
	for i, img := range imgs {
		pi := PlatformImage{Platform: c.Platforms[i], Uncompressed: uncompressed[i]}
		if pi.Digest, err = img.Digest(); err != nil {
			return r, err
		}
		layers, err := img.Layers()
		if err != nil {
			return r, err
		}
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return r, err
			}
			pi.Compressed += n
		}
		pi.Tarball = filepath.Join(c.OutDir, binary+"-"+pi.Platform.Architecture+".tar")
		if err := tarball.WriteToFile(pi.Tarball, tag, img); err != nil {
			return r, fmt.Errorf("tarball of %s for %s: %w", binary, pi.Platform, err)
		}
		r.Images = append(r.Images, pi)
	}
	return r, nil
}
