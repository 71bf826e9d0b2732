package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// compile builds every binary for platform p into dir with one go build:
// static (CGO_ENABLED=0), -trimpath, Config.LDFlags. The go command's build
// cache is shared with every other build of the same platform and flags.
func (c *Config) compile(ctx context.Context, p v1.Platform, dir string) error {
	goCmd := c.GoCommand
	if goCmd == "" {
		goCmd = "go"
	}
	args := []string{"build", "-trimpath", "-ldflags", c.LDFlags, "-o", dir + string(os.PathSeparator)}
	for _, b := range c.Binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = c.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, out.Bytes())
	}
	return nil
}
