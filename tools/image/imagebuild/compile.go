package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BuildEnv is the environment go build runs with, besides GOOS and GOARCH:
// static binaries.
func BuildEnv() []string {
	return []string{"CGO_ENABLED=0"}
}

// BuildTags are the build tags of every shipped binary (the Makefile's
// BUILDTAGS). grpcnotrace leaves out gRPC's golang.org/x/net/trace, whose
// debug pages (never served here) link html/template: its reflective method
// calls make the linker keep every exported method of every type, about 40%
// of each binary and 12 MB of csi-provisioner's resident memory
// (docs/performance.md, "Memory of one node's instance").
const BuildTags = "grpcnotrace"

// BuildFlags are the flags of go build, before -o and the packages: paths
// trimmed, BuildTags, and ldflags (the Makefile's LDFLAGS) as they are.
func BuildFlags(ldflags string) []string {
	return []string{"-trimpath", "-tags", BuildTags, "-ldflags", ldflags}
}

// compile builds every binary for platform p into dir with one go build:
// BuildEnv (static) and BuildFlags (-trimpath, BuildTags, Config.LDFlags). The go
// command's build cache is shared with every other build of the same
// platform and flags.
func (c *Config) compile(ctx context.Context, p v1.Platform, dir string) error {
	goCmd := c.GoCommand
	if goCmd == "" {
		goCmd = "go"
	}
	args := append(append([]string{"build"}, BuildFlags(c.LDFlags)...), "-o", dir+string(os.PathSeparator))
	for _, b := range c.Binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = c.Root
	cmd.Env = append(append(os.Environ(), BuildEnv()...), "GOOS="+p.OS, "GOARCH="+p.Architecture)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, out.Bytes())
	}
	return nil
}
