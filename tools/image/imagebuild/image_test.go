package imagebuild

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/klog/v2/ktesting"
)

var testPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// fakeIndex assembles the index of a binary whose "executable" is a few
// bytes per platform, as Build does after compiling, and writes it to cfg.OutDir.
func fakeIndex(t *testing.T, cfg *Config, binary string) Result {
	t.Helper()
	dir := t.TempDir()
	base, err := writeLayer(filepath.Join(dir, "base.tar.gz"), baseEntries(), cfg.Created)
	if err != nil {
		t.Fatal(err)
	}
	var imgs []v1.Image
	var sizes []int64
	for _, p := range cfg.Platforms {
		exe := filepath.Join(dir, p.Architecture)
		if err := os.WriteFile(exe, []byte("binary for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		bin, err := writeLayer(exe+".tar.gz", []entry{{name: binary, mode: 0o755, path: exe}}, cfg.Created)
		if err != nil {
			t.Fatal(err)
		}
		img, err := cfg.newImage(binary, p, base, bin)
		if err != nil {
			t.Fatal(err)
		}
		imgs, sizes = append(imgs, img), append(sizes, base.uncompressed+bin.uncompressed)
	}
	r, err := cfg.write(binary, imgs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testConfig(t *testing.T) *Config {
	return &Config{
		Platforms: testPlatforms, Repository: "csi-topology-provisioner", Version: "v0.1.0",
		Revision: "abc", Source: "https://example.com/src", Created: testEpoch, OutDir: t.TempDir(),
	}
}

func TestImageConfig(t *testing.T) {
	cfg := testConfig(t)
	r := fakeIndex(t, cfg, "mock-driver")
	idx, err := LayoutIndex(r.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != r.Index {
		t.Errorf("layout names index %s, Build reported %s", d, r.Index)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s", mt)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(testPlatforms) {
		t.Fatalf("index has %d manifests, want %d", len(m.Manifests), len(testPlatforms))
	}
	for i, desc := range m.Manifests {
		p := testPlatforms[i]
		t.Run(p.String(), func(t *testing.T) {
			if desc.Platform == nil || desc.Platform.String() != p.String() {
				t.Errorf("manifest %d: platform %v", i, desc.Platform)
			}
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			want := v1.Config{
				Entrypoint: []string{"/mock-driver"}, User: NonRootUser, WorkingDir: "/",
				Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				Labels: map[string]string{
					LabelTitle: "mock-driver", LabelVersion: "v0.1.0", LabelCreated: "2023-11-14T22:13:20Z",
					LabelRevision: "abc", LabelSource: "https://example.com/src",
				},
			}
			if diff := cmp.Diff(want, cf.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if !cf.Created.Time.Equal(testEpoch) || cf.OS != p.OS || cf.Architecture != p.Architecture {
				t.Errorf("created %v, platform %s/%s", cf.Created, cf.OS, cf.Architecture)
			}
			for _, h := range cf.History {
				if !h.Created.Time.Equal(testEpoch) {
					t.Errorf("history %q created %v", h.CreatedBy, h.Created)
				}
			}
			if r.Images[i].Digest != desc.Digest || !strings.HasSuffix(r.Images[i].Tarball, "mock-driver-"+p.Architecture+".tar") {
				t.Errorf("result %+v, index digest %s", r.Images[i], desc.Digest)
			}
			// The docker-load tarball holds this image under its tag.
			tag, err := name.NewTag(r.Reference)
			if err != nil {
				t.Fatal(err)
			}
			fromTar, err := tarball.ImageFromPath(r.Images[i].Tarball, &tag)
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := fromTar.ConfigName(); d != mustConfigName(t, img) {
				t.Errorf("tarball %s holds config %s, want the image's", r.Images[i].Tarball, d)
			}
		})
	}
}

func mustConfigName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestReproducible: the same inputs into two directories give the same
// index digest; another date gives another.
func TestReproducible(t *testing.T) {
	a, b := testConfig(t), testConfig(t)
	ra, rb := fakeIndex(t, a, "csi-provisioner"), fakeIndex(t, b, "csi-provisioner")
	if ra.Index != rb.Index {
		t.Errorf("two builds: index %s and %s", ra.Index, rb.Index)
	}
	c := testConfig(t)
	c.Created = testEpoch.Add(time.Second)
	if rc := fakeIndex(t, c, "csi-provisioner"); rc.Index == ra.Index {
		t.Error("another date gave the same index")
	}
}

// TestPush pushes a layout to an in-process registry and pulls it back.
func TestPush(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	cfg := testConfig(t)
	r := fakeIndex(t, cfg, "csi-node-publisher")
	pushed, err := Push(ctx, cfg.OutDir, host+"/team", "v0.1.0", []string{"csi-node-publisher"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Pushed{{Reference: host + "/team/csi-node-publisher:v0.1.0", Index: r.Index}}
	if diff := cmp.Diff(want, pushed); diff != "" {
		t.Errorf("pushed (-want +got):\n%s", diff)
	}
	ref, err := name.NewTag(want[0].Reference)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != r.Index {
		t.Errorf("registry serves index %s, want %s", d, r.Index)
	}
	if _, err := Push(ctx, cfg.OutDir, host+"/team", "v0.1.0", []string{"not-built"}); err == nil {
		t.Error("pushing an image that was not built: no error")
	}
}
