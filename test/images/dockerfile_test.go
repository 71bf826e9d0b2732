package images

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// dockerfile is what tools/dockerfile prints: the Dockerfile's stages as
// BuildKit's parser reads them, and each target as BuildKit's frontend
// converts it.
type dockerfile struct {
	Stages  []dockerfileStage
	Targets map[string]dockerfileTarget
}

type dockerfileStage struct {
	Name, Base string
	Copies     []dockerfileCopy
}

type dockerfileCopy struct {
	From               string
	Sources            []string
	Dest, Chown, Chmod string
}

type dockerfileTarget struct {
	OS, Architecture string
	Config           v1.Config
	Pulls            []string
	Runs             []dockerfileRun
	Warnings         []string
	Error            string
}

// dockerfileRun is a RUN: the simple commands of its script, expanded, and
// its command substitutions, which stand in the words as their Text.
type dockerfileRun struct {
	Calls []struct {
		Env, Args []string
	}
	Substitutions []struct {
		Text string
		Args []string
	}
}

// evalDockerfile runs tools/dockerfile, a module of its own (BuildKit's
// dependencies stay out of the project's go.mod), on the repository's
// Dockerfile for targets.
func evalDockerfile(t *testing.T, root, platform string, buildArgs map[string]string, targets []string) dockerfile {
	t.Helper()
	args := []string{"run", ".", "-f", filepath.Join(root, "Dockerfile"), "-platform", platform, "-build-platform", "linux/amd64"}
	for k, v := range buildArgs {
		args = append(args, "-build-arg", k+"="+v)
	}
	cmd := exec.CommandContext(t.Context(), "go", append(args, targets...)...)
	cmd.Dir = filepath.Join(root, "tools", "dockerfile")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tools/dockerfile: %v\n%s", err, stderr.Bytes())
	}
	var d dockerfile
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("tools/dockerfile output: %v", err)
	}
	return d
}

// chain is the COPY instructions of a stage and of the stages it is built
// on, and the image at the bottom (a name that is no stage).
func (d dockerfile) chain(name string) (copies []dockerfileCopy, base string) {
	for range len(d.Stages) + 1 {
		i := slices.IndexFunc(d.Stages, func(s dockerfileStage) bool { return s.Name == name })
		if i < 0 {
			return copies, name
		}
		copies = append(copies, d.Stages[i].Copies...)
		name = d.Stages[i].Base
	}
	return copies, "(a loop of stages)"
}

// TestDockerfile holds the Dockerfile to `make image`: a target per binary
// of the Makefile's BINARIES, each converted by BuildKit's own frontend into
// the image config imagebuild gives (entrypoint, user, working
// directory, PATH, labels from the same build args), on imagebuild's base
// (none: scratch) plus its base files, with the binary compiled by the
// Makefile's go build: imagebuild's env and flags and the Makefile's
// LDFLAGS, cross-compiled for the target platform by a builder on go.mod's
// Go release.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	binaries := strings.Fields(makefileVar(t, root, testVersion, "BINARIES"))
	cfg := imagebuild.Config{
		Version:  testVersion,
		Revision: "0123456789abcdef",
		Source:   makefileVar(t, root, testVersion, "IMAGE_SOURCE"),
		Licenses: makefileVar(t, root, testVersion, "LICENSES"),
		Created:  time.Unix(1700000000, 0),
	}
	labels := cfg.ImageConfig("x").Labels
	buildArgs := map[string]string{
		"VERSION": cfg.Version, "REVISION": cfg.Revision, "SOURCE": cfg.Source, "LICENSES": cfg.Licenses,
		"CREATED": labels[imagebuild.LabelCreated],
	}
	// Cross-compiled: the target platform is not the builder's.
	d := evalDockerfile(t, root, "linux/arm64", buildArgs, binaries)
	for _, b := range binaries {
		t.Run(b, func(t *testing.T) {
			target := d.Targets[b]
			if target.Error != "" {
				t.Fatalf("no target %s: %s", b, target.Error)
			}
			if len(target.Warnings) != 0 {
				t.Errorf("BuildKit's lint warnings: %q", target.Warnings)
			}
			if diff := cmp.Diff(cfg.ImageConfig(b), target.Config); diff != "" {
				t.Errorf("image config (-make image +Dockerfile):\n%s", diff)
			}
			if target.OS != "linux" || target.Architecture != "arm64" {
				t.Errorf("image platform %s/%s, want linux/arm64", target.OS, target.Architecture)
			}
			copies, base := d.chain(b)
			if base != imagebuild.BaseImage {
				t.Errorf("target %s is built on %q, make image's on %q", b, base, imagebuild.BaseImage)
			}
			checkBuilder(t, root, target.Pulls)
			checkCopies(t, copies, b, goBuild(t, root, target.Runs, b), rootFS(t, target.Runs))
		})
	}
}

// TestDockerfileDefaults: built without build args, the images are labelled
// with the Makefile's license and source, as make image labels them.
func TestDockerfileDefaults(t *testing.T) {
	root := repoRoot(t)
	b := strings.Fields(makefileVar(t, root, testVersion, "BINARIES"))[0]
	target := evalDockerfile(t, root, "linux/amd64", nil, []string{b}).Targets[b]
	if target.Error != "" {
		t.Fatalf("no target %s: %s", b, target.Error)
	}
	for label, want := range map[string]string{
		imagebuild.LabelLicenses: makefileVar(t, root, testVersion, "LICENSES"),
		imagebuild.LabelSource:   makefileVar(t, root, testVersion, "IMAGE_SOURCE"),
	} {
		if got := target.Config.Labels[label]; got != want {
			t.Errorf("label %s defaults to %q, make image sets %q", label, got, want)
		}
	}
}

// checkBuilder: the builder is the golang image of go.mod's Go release
// (major.minor: the image carries its latest patch), the one image pulled.
func checkBuilder(t *testing.T, root string, pulls []string) {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct{ Go string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	release := strings.Join(strings.SplitN(mod.Go, ".", 3)[:2], ".")
	if want := []string{"docker.io/library/golang:" + release}; !slices.Equal(pulls, want) {
		t.Errorf("the build pulls %q, want %q (go.mod: go %s)", pulls, want, mod.Go)
	}
}

// goBuild finds the one go build of the runs, checks it against make image's
// (imagebuild's env and flags with the Makefile's LDFLAGS, GOOS and GOARCH
// of the target platform, binary among the packages) and returns its -o
// directory. Command substitutions in its words are run in the repository,
// as the builder runs them in its copy.
func goBuild(t *testing.T, root string, runs []dockerfileRun, binary string) string {
	t.Helper()
	var builds [][]string
	var env []string
	for _, r := range runs {
		for _, c := range r.Calls {
			if len(c.Args) < 2 || c.Args[0] != "go" || c.Args[1] != "build" {
				continue
			}
			args := slices.Clone(c.Args[2:])
			for _, s := range r.Substitutions {
				for i := range args {
					if strings.Contains(args[i], s.Text) {
						args[i] = strings.ReplaceAll(args[i], s.Text, commandOutput(t, root, s.Args))
					}
				}
			}
			builds, env = append(builds, args), c.Env
		}
	}
	if len(builds) != 1 {
		t.Fatalf("%d go build commands in the Dockerfile, want one: %q", len(builds), builds)
	}
	for _, kv := range append(imagebuild.BuildEnv(), "GOOS=linux", "GOARCH=arm64") {
		if !slices.Contains(env, kv) {
			t.Errorf("go build runs without %s: environment %q", kv, env)
		}
	}
	args := builds[0]
	flags := imagebuild.BuildFlags(makefileVar(t, root, testVersion, "LDFLAGS"))
	n := len(flags)
	if len(args) < n+3 || !slices.Equal(args[:n], flags) || args[n] != "-o" {
		t.Fatalf("go build %q, want go build %q -o <dir> <packages>", args, flags)
	}
	if pkgs := args[n+2:]; !slices.Contains(pkgs, "./cmd/...") && !slices.Contains(pkgs, "./cmd/"+binary) {
		t.Errorf("go build of %q does not build ./cmd/%s", pkgs, binary)
	}
	return args[n+1]
}

// commandOutput runs args in dir and returns its output, trimmed.
func commandOutput(t *testing.T, dir string, args []string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// rootFS finds where a run unpacks `image rootfs` (imagebuild's base files)
// with tar as root, keeping owners and modes; it returns that directory.
func rootFS(t *testing.T, runs []dockerfileRun) string {
	t.Helper()
	for _, r := range runs {
		image, dir := false, ""
		for _, c := range r.Calls {
			switch {
			case slices.Equal(c.Args, []string{"go", "run", "./tools/image", "rootfs"}):
				image = true
			case len(c.Args) > 0 && c.Args[0] == "tar":
				i := slices.Index(c.Args, "-C")
				if slices.Contains(c.Args, "-x") && slices.Contains(c.Args, "-p") && slices.Contains(c.Args, "--same-owner") && i > 0 && i+1 < len(c.Args) {
					dir = c.Args[i+1]
				}
			}
		}
		if image && dir != "" {
			return dir
		}
	}
	t.Fatal("no RUN of the Dockerfile unpacks `go run ./tools/image rootfs` with tar -x -p --same-owner -C <dir>")
	return ""
}

// checkCopies: a target's stages copy exactly the base files and the binary
// from the builder, with their owners and modes as built.
func checkCopies(t *testing.T, copies []dockerfileCopy, binary, outDir, rootfs string) {
	t.Helper()
	if len(copies) == 0 {
		t.Fatal("the target copies nothing")
	}
	from := copies[0].From
	want := []dockerfileCopy{
		{From: from, Sources: []string{strings.TrimSuffix(outDir, "/") + "/" + binary}, Dest: "/" + binary},
		{From: from, Sources: []string{strings.TrimSuffix(rootfs, "/") + "/"}, Dest: "/"},
	}
	if diff := cmp.Diff(want, copies); diff != "" || from == "" {
		t.Errorf("COPY instructions of the target's stages, from the builder %q (-want +got):\n%s", from, diff)
	}
}
