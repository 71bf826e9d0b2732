package images

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

const testVersion = "v0.0.0-imagestest"

// binaries are the images `make image` builds (every directory of cmd/),
// with what --version prints.
var binaries = []struct {
	name string
	// version is the start of the line --version prints (the scheduler
	// adds the Kubernetes release it embeds).
	version string
	// user is the image's user: root for the sidecars that connect to a
	// driver's socket (as upstream's image), nonroot for the others.
	user string
}{
	{name: "csi-node-publisher", version: "csi-node-publisher " + testVersion, user: "0:0"},
	{name: "csi-node-router", version: "csi-node-router " + testVersion, user: "65532:65532"},
	{name: "csi-provisioner", version: "csi-provisioner " + testVersion, user: "0:0"},
	{name: "csi-scheduler-extender", version: "csi-scheduler-extender " + testVersion, user: "65532:65532"},
	{name: "csi-topology-scheduler", version: "csi-topology-scheduler " + testVersion + " (Kubernetes v1.", user: "65532:65532"},
	{name: "kubectl-csi_topology", version: "kubectl-csi_topology " + testVersion, user: "65532:65532"},
	{name: "mock-driver", version: "mock-driver " + testVersion, user: "65532:65532"},
}

// repoRoot is controlplane.RepoRoot for a test: the module root, or the
// test fails.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// makefileVar is a variable of the Makefile as make expands it with
// VERSION=version, so the test builds exactly as `make image` does.
func makefileVar(t *testing.T, root, version, name string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", "--no-print-directory", "VERSION="+version,
		"--eval", "print-var: ; @echo $("+name+")", "print-var")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make: expanding %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func build(t *testing.T, root, out string) []imagebuild.Result {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	var names []string
	for _, b := range binaries {
		names = append(names, b.name)
	}
	res, err := imagebuild.Build(ctx, imagebuild.Config{
		Root:       root,
		Binaries:   names,
		Platforms:  []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		Repository: "csi-topology-provisioner",
		Version:    testVersion,
		LDFlags:    makefileVar(t, root, testVersion, "LDFLAGS"),
		Revision:   "0123456789abcdef",
		Licenses:   makefileVar(t, root, testVersion, "LICENSES"),
		Source:     "https://github.com/csi-topology-provisioner/csi-topology-provisioner",
		Created:    time.Unix(1700000000, 0),
		OutDir:     out,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestImages builds every image twice, into two directories, and checks the
// first build's images.
func TestImages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the images are linux images; their binaries run on linux only")
	}
	root := repoRoot(t)
	first := build(t, root, t.TempDir())
	second := build(t, root, t.TempDir())
	if len(first) != len(binaries) {
		t.Fatalf("built %d images, want %d", len(first), len(binaries))
	}
	for i, b := range binaries {
		t.Run(b.name, func(t *testing.T) {
			r := first[i]
			if r.Index != second[i].Index {
				t.Errorf("not reproducible: index %s, then %s", r.Index, second[i].Index)
			}
			idx, err := imagebuild.LayoutIndex(r.Layout)
			if err != nil {
				t.Fatal(err)
			}
			img, err := idx.Image(r.Images[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, img, b.name, b.user)
			exe := checkLayers(t, img, b.name)
			run(t, exe, "--version", b.version)
			run(t, exe, "--help", "")
		})
	}
}

func checkConfig(t *testing.T, img v1.Image, binary, user string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/" + binary}) || c.User != user || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q, user %q; want [/%s], none, %s", c.Entrypoint, c.Cmd, c.User, binary, user)
	}
	for k, want := range map[string]string{
		imagebuild.LabelVersion:  testVersion,
		imagebuild.LabelRevision: "0123456789abcdef",
		imagebuild.LabelSource:   "https://github.com/csi-topology-provisioner/csi-topology-provisioner",
		imagebuild.LabelCreated:  "2023-11-14T22:13:20Z",
		imagebuild.LabelLicenses: "Apache-2.0",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
}

// checkLayers lists the files of every layer: exactly the base files and
// the binary, so no shell or anything else; it returns the binary,
// extracted to a file.
func checkLayers(t *testing.T, img v1.Image, binary string) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), binary)
	var names []string
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if h.Uid != 0 && h.Name != "home/nonroot/" {
				t.Errorf("%s owned by %d", h.Name, h.Uid)
			}
			if h.Name == binary {
				if h.Mode != 0o755 {
					t.Errorf("%s: mode %o", h.Name, h.Mode)
				}
				f, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(f, tr); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	want := []string{"etc/", "etc/group", "etc/passwd", "home/", "home/nonroot/", "tmp/", binary}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("files in the layers: %q, want %q", names, want)
	}
	return exe
}

// run runs the extracted binary with one flag; it must succeed, and its
// output start with want when want is set.
func run(t *testing.T, exe, flag, want string) {
	t.Helper()
	out, err := exec.Command(exe, flag).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(exe), flag, err, out)
		return
	}
	if !strings.HasPrefix(string(out), want) || len(out) == 0 {
		t.Errorf("%s %s printed %q, want it to start with %q", filepath.Base(exe), flag, out, want)
	}
}

// TestLicenseFile keeps the images' licenses label true: the LICENSE at the
// repository's root is the Apache License 2.0 that LICENSES names.
func TestLicenseFile(t *testing.T) {
	root := repoRoot(t)
	if got := makefileVar(t, root, testVersion, "LICENSES"); got != "Apache-2.0" {
		t.Fatalf("Makefile LICENSES = %q; update this test and LICENSE together", got)
	}
	data, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	head := string(data[:min(len(data), 300)])
	if !strings.Contains(head, "Apache License") || !strings.Contains(head, "Version 2.0, January 2004") {
		t.Errorf("LICENSE does not start as the Apache License 2.0:\n%s", head)
	}
}
