// Command dockerfile evaluates a Dockerfile the way a BuildKit build of it
// would, without building anything, and prints what the build would do as
// JSON: for each target, the image config BuildKit's own Dockerfile frontend
// (dockerfile2llb) gives it, the images it pulls, and the processes it runs,
// with the commands of their shell scripts parsed by a POSIX shell parser
// and expanded in the environment BuildKit gives them; and the stages as the
// frontend's parser reads them. test/images TestDockerfile runs it to hold
// the repository's Dockerfile to what `make image` builds.
//
// It is a module of its own (tools/dockerfile/go.mod) so that BuildKit's
// dependencies do not move the versions the project's module requires.
//
//	go run . -f ../../Dockerfile -platform linux/arm64 -build-arg VERSION=v0.1.0 csi-provisioner mock-driver
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/platforms"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dockerfile:", err)
		os.Exit(1)
	}
}

// buildArgs collects -build-arg NAME=VALUE flags.
type buildArgs map[string]string

func (b buildArgs) String() string { return fmt.Sprint(map[string]string(b)) }

func (b buildArgs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("build arg %q: want NAME=VALUE", s)
	}
	b[k] = v
	return nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dockerfile", flag.ContinueOnError)
	file := fs.String("f", "Dockerfile", "The Dockerfile.")
	target := fs.String("platform", "linux/amd64", "The target platform (--platform of docker buildx build).")
	build := fs.String("build-platform", "linux/amd64", "The platform of the machine that builds.")
	bargs := buildArgs{}
	fs.Var(bargs, "build-arg", "NAME=VALUE, as --build-arg of docker build; repeatable.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dt, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	tp, err := platforms.Parse(*target)
	if err != nil {
		return fmt.Errorf("-platform: %w", err)
	}
	bp, err := platforms.Parse(*build)
	if err != nil {
		return fmt.Errorf("-build-platform: %w", err)
	}
	out := Output{Targets: map[string]Target{}}
	if out.Stages, err = parseStages(dt); err != nil {
		return err
	}
	for _, name := range fs.Args() {
		t, err := evaluate(ctx, dt, name, tp, bp, bargs)
		if err != nil {
			t = Target{Error: err.Error()}
		}
		out.Targets[name] = t
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
