package imagebuild

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/klog/v2"
)

// Pushed is one index Push sent.
type Pushed struct {
	Reference string
	Index     v1.Hash
}

// Push sends the multi-platform index of each binary, read from the OCI
// layout outDir/<binary>/ that Build wrote, to <registry>/<binary>:<version>,
// with the credentials of the default keychain (~/.docker/config.json) and
// any extra remote options.
func Push(ctx context.Context, outDir, registry, version string, binaries []string, opts ...remote.Option) ([]Pushed, error) {
	logger := klog.FromContext(ctx)
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	var out []Pushed
	for _, b := range binaries {
		idx, err := LayoutIndex(filepath.Join(outDir, b))
		if err != nil {
			return out, fmt.Errorf("image %s (run make image first): %w", b, err)
		}
		ref := Reference(registry, b, version)
		tag, err := name.NewTag(ref)
		if err != nil {
			return out, err
		}
		if err := remote.WriteIndex(tag, idx, opts...); err != nil {
			return out, fmt.Errorf("pushing %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return out, err
		}
		logger.Info("Pushed", "image", ref, "index", d.String())
		out = append(out, Pushed{Reference: ref, Index: d})
	}
	return out, nil
}

// LayoutIndex returns the multi-platform index an OCI layout written by
// Build names (the only entry of its index.json).
func LayoutIndex(dir string) (v1.ImageIndex, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("layout %s names %d manifests, want 1 index", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
